package molecule

import (
	"fmt"
	"strings"
	"sync"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

const redacted = "[REDACTED]"

// redactor removes the workspace token from text: the one the daemon started with (secret) and
// every one it took into use later (rotated, shared by every copy of the redactor). Response
// bodies and transport errors are quoted in logs and returned errors; a platform or proxy that
// echoes request headers would otherwise leak the token there.
type redactor struct {
	secret  string
	rotated *secretSet
}

// secretSet is the tokens taken into use after the first (rotation, a token register issued).
type secretSet struct {
	mu   sync.RWMutex
	list []string
}

func (s *secretSet) add(secret string) {
	if s == nil || len(secret) < minSecretLen {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.list {
		if x == secret {
			return
		}
	}
	s.list = append(s.list, secret)
}

func (s *secretSet) all() []string {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.list
}

// minSecretLen avoids rewriting every occurrence of a trivially short "secret" (such a token is
// not realistic, and replacing e.g. every "a" would make logs useless).
const minSecretLen = 4

func (r redactor) String(s string) string {
	s = redactOne(s, r.secret)
	for _, secret := range r.rotated.all() {
		s = redactOne(s, secret)
	}
	return s
}

func redactOne(s, secret string) string {
	if len(secret) < minSecretLen || !strings.Contains(s, secret) {
		return s
	}
	return strings.ReplaceAll(s, secret, redacted)
}

// Logger wraps l so every message and field it writes goes through the redactor.
func (r redactor) Logger(l *zap.Logger) *zap.Logger {
	if len(r.secret) < minSecretLen && r.rotated == nil {
		return l
	}
	return l.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return &redactCore{Core: c, r: r}
	}))
}

// redactCore is a zapcore.Core that redacts entries before the wrapped core sees them.
type redactCore struct {
	zapcore.Core
	r redactor
}

func (c *redactCore) With(fields []zapcore.Field) zapcore.Core {
	return &redactCore{Core: c.Core.With(c.fields(fields)), r: c.r}
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
	ent.Message = c.r.String(ent.Message)
	ent.Stack = c.r.String(ent.Stack)
	if ce := c.Core.Check(ent, nil); ce != nil {
		ce.Write(c.fields(fields)...)
	}
	return nil
}

// fields rewrites every field that can carry text into a redacted string field. Numbers, bools
// and durations cannot hold the token and pass unchanged.
func (c *redactCore) fields(in []zapcore.Field) []zapcore.Field {
	out := make([]zapcore.Field, len(in))
	for i, f := range in {
		switch f.Type {
		case zapcore.StringType:
			f.String = c.r.String(f.String)
		case zapcore.ByteStringType:
			if b, ok := f.Interface.([]byte); ok {
				f = zap.String(f.Key, c.r.String(string(b)))
			}
		case zapcore.ErrorType:
			if err, ok := f.Interface.(error); ok && err != nil {
				f = zap.String(f.Key, c.r.String(err.Error()))
			}
		case zapcore.StringerType, zapcore.ReflectType, zapcore.ObjectMarshalerType,
			zapcore.ArrayMarshalerType, zapcore.InlineMarshalerType, zapcore.BinaryType:
			f = zap.String(f.Key, c.r.String(fmt.Sprintf("%+v", f.Interface)))
		}
		out[i] = f
	}
	return out
}
