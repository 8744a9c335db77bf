// Package earlysignal catches the daemon's signals as early as a Go program can, in an image a
// reload started.
//
// execve resets every caught signal to its default action and keeps only ignored ones. Go then
// installs its own handler at start, which ends the process for SIGTERM and SIGINT until
// os/signal.Notify is called (and keeps an inherited "ignore" of SIGHUP and SIGINT until then).
// A reloaded image that called Notify only in main would die of a SIGTERM or a SIGHUP sent in
// its first milliseconds: the time to initialize every package it links. This package has no
// dependency but os/signal, so the runtime initializes it among the first; its init is this
// package's one purpose and acts only when the environment names a handoff (EnvHandoff), that
// is in an image a reload started.
package earlysignal

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

// EnvHandoff is the variable a reloading image sets for the next (handoff.EnvFD; this package
// must not import handoff, which would delay its initialization).
const EnvHandoff = "CODEX_WARM_HANDOFF_FD"

// Caught are the channels Notify was called with at initialization.
type Caught struct {
	// Stop receives SIGTERM and SIGINT; Reload receives SIGHUP. They are buffered as the
	// daemon's own channels are: a stop twice (the second cuts the drain short), a reload once.
	Stop, Reload chan os.Signal
	// At is when Notify returned: with the handoff's time of writing, how long the new image
	// was exposed.
	At time.Time
}

var caught *Caught

func init() {
	if _, ok := os.LookupEnv(EnvHandoff); !ok {
		return
	}
	c := &Caught{Stop: make(chan os.Signal, 2), Reload: make(chan os.Signal, 1)}
	signal.Notify(c.Reload, syscall.SIGHUP)
	signal.Notify(c.Stop, syscall.SIGTERM, syscall.SIGINT)
	c.At = time.Now()
	caught = c
}

// Take returns the channels caught at initialization, once; nil when this image was not
// started by a reload (or Take was called before). The caller owns them: it reads them as its
// own signal channels and calls signal.Stop on them.
func Take() *Caught {
	c := caught
	caught = nil
	return c
}
