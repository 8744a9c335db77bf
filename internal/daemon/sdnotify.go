package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// serviceManagerEnv are the variables systemd gives the daemon to talk to it: they stay in the
// daemon's environment, so that a reloaded image talks to it too, and never reach a codex child
// (a child that wrote to NOTIFY_SOCKET would be refused by NotifyAccess=main at best).
func serviceManagerEnv() []string {
	return []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}
}

// notify sends state to the service manager (Type=notify); without NOTIFY_SOCKET it does
// nothing.
func (d *daemon) notify(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		d.log.Warn("could not tell the service manager", zap.String("state", state), zap.Error(err))
	}
}

// notifyReloading says a reload began, with the CLOCK_MONOTONIC time systemd (253+) matches
// to its own reload request.
func (d *daemon) notifyReloading() {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		d.notify(sd.SdNotifyReloading)
		return
	}
	d.notify(fmt.Sprintf("%s\nMONOTONIC_USEC=%d", sd.SdNotifyReloading, ts.Nano()/1000))
}

// watchdog pings the service manager's watchdog (WatchdogSec=) at half its interval, as long
// as the daemon's own loops answer (aliveCheck) and never because of anything outside it: the
// model or the platform being unreachable must not make systemd restart a daemon whose warm
// children are fine. It returns when ctx ends.
func (d *daemon) watchdog(ctx context.Context) {
	interval, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		d.log.Warn("the service manager's watchdog settings are unreadable; not pinging it", zap.Error(err))
		return
	}
	if interval <= 0 {
		return
	}
	tick := time.NewTicker(interval / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, interval/2)
		err := d.aliveCheck(cctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("watchdog: the daemon's loops do not answer; not pinging the service manager", zap.Error(err))
			}
			continue
		}
		d.notify(sd.SdNotifyWatchdog)
	}
}

// aliveCheck proves the daemon serves: its main loop takes a request (it runs reloads and
// stops), the supervisor's lock is free enough to give a status, and the control socket
// answers its liveness probe.
func (d *daemon) aliveCheck(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case d.alive <- ack:
	case <-ctx.Done():
		return errors.New("the main loop did not take the check")
	}
	select {
	case <-ack:
	case <-ctx.Done():
		return errors.New("the main loop did not answer the check")
	}
	done := make(chan struct{})
	go func() { // bounded by the supervisor's lock; the check waits below, or gives up
		defer close(done)
		_ = d.sup.Status()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return errors.New("the supervisor did not give its status")
	}
	code, _, err := controlGet(ctx, d.cfg.StateDir, "/v1/healthz", time.Until(deadlineOf(ctx)))
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("control socket: healthz answered %d", code)
	}
	return nil
}

func deadlineOf(ctx context.Context) time.Time {
	if t, ok := ctx.Deadline(); ok {
		return t
	}
	return time.Now().Add(5 * time.Second)
}
