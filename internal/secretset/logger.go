package secretset

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Logger wraps l so every message and field it writes is redacted (RedactKnown). Response bodies
// and transport errors are quoted in logs; a platform or proxy that echoes request headers, or a
// codex error quoting a tool's output, would otherwise carry a secret there.
func (s *Set) Logger(l *zap.Logger) *zap.Logger {
	if s == nil {
		return l
	}
	return l.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return &redactCore{Core: c, s: s}
	}))
}

// redactCore is a zapcore.Core that redacts entries before the wrapped core sees them.
type redactCore struct {
	zapcore.Core
	s *Set
}

func (c *redactCore) With(fields []zapcore.Field) zapcore.Core {
	return &redactCore{Core: c.Core.With(c.fields(fields)), s: c.s}
}

func (c *redactCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

// Write goes through the wrapped core's Check so that a tee of cores with different levels
// keeps filtering per core (a tee's Write would write to all of them).
func (c *redactCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	ent.Message = c.s.RedactKnown(ent.Message)
	ent.Stack = c.s.RedactKnown(ent.Stack)
	if ce := c.Core.Check(ent, nil); ce != nil {
		ce.Write(c.fields(fields)...)
	}
	return nil
}

// fields redacts every field that can carry text. A string stays a string; a field of another
// kind (an error, an array, an object, a Stringer) becomes a redacted string only when it holds
// a secret, so that the log keeps its shape (an array stays a JSON array) for every entry that
// has nothing to hide. Numbers, bools and durations cannot hold a secret and pass unchanged.
func (c *redactCore) fields(in []zapcore.Field) []zapcore.Field {
	out := make([]zapcore.Field, len(in))
	for i, f := range in {
		switch f.Type {
		case zapcore.StringType:
			f.String = c.s.RedactKnown(f.String)
		case zapcore.ByteStringType:
			if b, ok := f.Interface.([]byte); ok {
				f = zap.String(f.Key, c.s.RedactKnown(string(b)))
			}
		case zapcore.ErrorType:
			if err, ok := f.Interface.(error); ok && err != nil {
				f = c.ifSecret(f, err.Error())
			}
		case zapcore.StringerType, zapcore.ReflectType, zapcore.ObjectMarshalerType,
			zapcore.ArrayMarshalerType, zapcore.InlineMarshalerType, zapcore.BinaryType:
			f = c.ifSecret(f, fmt.Sprintf("%+v", f.Interface))
		}
		out[i] = f
	}
	return out
}

// ifSecret is f, or a string field of text redacted when text holds a secret.
func (c *redactCore) ifSecret(f zapcore.Field, text string) zapcore.Field {
	if red := c.s.RedactKnown(text); red != text {
		return zap.String(f.Key, red)
	}
	return f
}
