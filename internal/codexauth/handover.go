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

// Carried is what a Manager knows of its login beyond auth.json: the refresh tokens it must never
// send again. A reload carries it to the next image of the daemon (Config.Carried), which reads
// the tokens themselves from auth.json.
type Carried struct {
	// Doubt is a refresh token a call may have spent without an answer (refresh_uncertain);
	// Dead one the endpoint refused for good.
	Doubt string `json:"doubt,omitempty"`
	Dead  string `json:"dead,omitempty"`
	// Spent are the refresh tokens rotated away or given up.
	Spent []string `json:"spent,omitempty"`
	// Error is why the login is unusable, when it is.
	Error string `json:"error,omitempty"`
}

// Carry is what the next image must know of the login.
func (m *Manager) Carry() Carried {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := Carried{Doubt: m.doubt, Dead: m.dead, Error: m.lastErr}
	for t := range m.spent {
		c.Spent = append(c.Spent, t)
	}
	return c
}

// take adopts what the previous image knew: a login auth.json still holds whose refresh token
// was in doubt or refused stays so.
func (m *Manager) take(c Carried) {
	for _, t := range c.Spent {
		m.spent[t] = true
	}
	m.doubt, m.dead = c.Doubt, c.Dead
	why := c.Error
	switch m.tok.RefreshToken {
	case "":
	case c.Doubt:
		if why == "" {
			why = "the previous image of the daemon got no answer to a refresh with this refresh token: it may be spent"
		}
		m.state, m.lastOutcome, m.lastErr = StateUncertain, OutcomeUncertain, why
	case c.Dead:
		if why == "" {
			why = "the previous image of the daemon saw this refresh token refused"
		}
		m.state, m.lastOutcome, m.lastErr = StateGone, OutcomeRejected, why
	}
}
