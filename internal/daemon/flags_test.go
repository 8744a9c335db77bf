package daemon

import (
	"flag"
	"io"
)

// parseRunConfig parses run's flags as the binary does, its usage and errors going to stderr.
func parseRunConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	return ParseFlags(fs, args, getenv)
}
