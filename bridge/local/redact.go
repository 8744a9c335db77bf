package local

import (
	"net/http"

	"github.com/molecule-ai/codex-warm/internal/secretset"
)

// redactWriter passes every write of an answer through the daemon's secret set (Config.Secrets),
// at the one door out of this inbox: replies, errors, commands' answers, chat state, approval
// prompts and every event of a stream, whoever built the text. codex may have read a secret (a
// tool's output, a file, the platform's secrets) and print it in its answer or a step.
//
// Each write is a whole JSON document or a whole event (writeJSON, eventStream.send), so a
// secret never straddles two writes; a JSON-escaped secret is caught too (RedactJSON).
type redactWriter struct {
	http.ResponseWriter
	set *secretset.Set
}

// redacting wraps w when the inbox has a secret set.
func (h *Inbox) redacting(w http.ResponseWriter) http.ResponseWriter {
	if h.cfg.Secrets == nil {
		return w
	}
	return &redactWriter{ResponseWriter: w, set: h.cfg.Secrets}
}

// Write writes b redacted. It reports len(b) written when all of the redacted bytes were: the
// caller's count is of what it asked to write.
func (r *redactWriter) Write(b []byte) (int, error) {
	if _, err := r.ResponseWriter.Write(r.set.RedactJSON(b)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Unwrap lets http.ResponseController reach the connection (deadlines, flushes).
func (r *redactWriter) Unwrap() http.ResponseWriter { return r.ResponseWriter }
