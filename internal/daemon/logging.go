package daemon

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger builds the daemon's root logger. JSON is the default because operators ship these
// lines to a log store; console is for people watching a terminal.
func newLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case "json", "":
		enc = zapcore.NewJSONEncoder(encCfg)
	case "console":
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	default:
		return nil, fmt.Errorf("log format %q: want json or console", format)
	}
	core := zapcore.NewCore(enc, zapcore.AddSync(w), lvl)
	// Sampling bounds log volume when a fault repeats for many chats at once.
	core = zapcore.NewSamplerWithOptions(core, 1e9, 100, 10)
	return zap.New(core, zap.AddCaller()), nil
}
