package daemon

import (
	"errors"
	"flag"
	"fmt"
)

// ExitCode is returned by a command that already reported its failure (for example flag parsing,
// or the daemon's log) and only needs the process to exit with that code.
type ExitCode int

func (e ExitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// FlagsError turns a flag parsing error into the exit status: 0 for -h (help was asked for and
// printed), 2 for a usage error (already printed with the usage).
func FlagsError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return ExitCode(0)
	}
	return ExitCode(2)
}
