package daemon

import (
	"errors"
	"flag"
	"os"
	"path/filepath"

	"github.com/molecule-ai/codex-warm/appserver"
)

// noCodexHint is what to do when no codex was found.
const noCodexHint = "pass --codex-bin PATH or set CODEX_BIN to the native codex binary " +
	"(in a checkout, `make codex` installs the pinned version and `make -s codex-bin` prints its path; " +
	"`make install` puts it beside supervisor)"

// CodexLocation is the codex binary the daemon runs and how it was found.
type CodexLocation struct {
	// Bin is the native binary.
	Bin string
	// Given is what pointed at it: the --codex-bin / CODEX_BIN value, the file beside the
	// supervisor executable, or the PATH entry. It differs from Bin for the npm node wrapper.
	Given string
	// From says where Given came from: "--codex-bin", "CODEX_BIN", "beside supervisor" or
	// "PATH".
	From string
}

// CodexBinSource names where a --codex-bin value came from, for FindCodex: the flag when it was
// given on the command line (it wins over the variable), else the CODEX_BIN variable it
// defaults to, else "" (nothing given).
func CodexBinSource(fs *flag.FlagSet, value string) string {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "codex-bin" })
	switch {
	case given:
		return "--codex-bin"
	case value != "":
		return "CODEX_BIN"
	default:
		return ""
	}
}

// FindCodex resolves the codex binary: hint, given by hintFrom (CodexBinSource), when set, else
// a codex beside the supervisor executable, else the first in PATH. Beside comes before PATH so
// that `make install`'s pinned codex wins over whatever codex a user installed for themselves.
func FindCodex(hint, hintFrom string) (CodexLocation, error) {
	loc := CodexLocation{Given: hint, From: hintFrom}
	if hint == "" {
		if p, ok := codexBesideSelf(); ok {
			loc.Given, loc.From = p, "beside supervisor"
		} else {
			loc.From = "PATH"
		}
	}
	bin, err := appserver.ResolveBinary(loc.Given)
	if errors.Is(err, appserver.ErrNoCodex) {
		return loc, &noCodexError{err: err}
	}
	if err != nil {
		return loc, err
	}
	loc.Bin = bin
	if loc.Given == "" {
		loc.Given = bin
	}
	return loc, nil
}

// codexBesideSelf returns the codex file in the directory of the running executable. On Linux
// os.Executable resolves symbolic links, so a supervisor linked from bin/ finds the codex
// installed beside its real file.
func codexBesideSelf() (string, bool) {
	self, err := os.Executable()
	if err != nil {
		return "", false
	}
	p := filepath.Join(filepath.Dir(self), "codex")
	fi, err := os.Stat(p)
	return p, err == nil && fi.Mode().IsRegular()
}

// noCodexError is FindCodex's error when no codex was found: it carries the hint on how to give
// the daemon one, which doctor prints as the fix.
type noCodexError struct{ err error }

func (e *noCodexError) Error() string { return e.err.Error() + "; " + noCodexHint }
func (e *noCodexError) Unwrap() error { return e.err }
