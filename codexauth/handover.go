package codexauth

import (
	"context"
	"errors"
	"fmt"
)

// ErrHeld is what Refresh answers while Hold holds the login: a refresh is not started while the
// daemon hands itself over to a new image, whose exec would cut its call.
var ErrHeld = errors.New("the ChatGPT login is held while the daemon reloads; the refresh is retried")

// Hold readies the login for a reload in place: it waits, until ctx is done, for the refresh in
// flight (its answer becomes the login, written to auth.json, which the next image reads) and
// for a write-back that failed, and starts no refresh until release. A refresh token must never
// be sent again: a call cut by the exec may have spent it and its answer would be lost, and the
// next image, reading auth.json, would send the spent token again. When ctx ends first, the
// login is let go and the error says why (the reload is refused).
func (m *Manager) Hold(ctx context.Context) (release func(), err error) {
	m.mu.Lock()
	m.held++
	m.mu.Unlock()
	release = func() {
		m.mu.Lock()
		m.held--
		m.mu.Unlock()
	}
	for {
		m.mu.Lock()
		f := m.flight
		m.mu.Unlock()
		if f == nil {
			break
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			release()
			return nil, fmt.Errorf("a ChatGPT token refresh awaits the token endpoint's answer: %w", context.Cause(ctx))
		}
	}
	if m.pendingWrite() {
		m.retryWriteBack(ctx)
		if m.pendingWrite() {
			release()
			return nil, errors.New("the refreshed ChatGPT login could not be written back to auth.json: the daemon holds its only copy")
		}
	}
	return release, nil
}
