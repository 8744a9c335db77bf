package codexauth

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"time"

	"go.uber.org/zap"
)

// Bounds of a refresh of the daemon's own login.
const (
	// DefaultCallBound is how long a refresh call's answer is awaited. A token endpoint that
	// answers late has still rotated the tokens: giving up and sending the same refresh token
	// again would be refused as reused, and the login lost.
	DefaultCallBound = 2 * time.Minute
	// DefaultMaxPerMinute caps token endpoint calls in any minute. Pacing (see dueAt) makes one
	// call every half-life of a token at most; a minute with more is a loop, reported as a bug.
	DefaultMaxPerMinute = 6
	// writeRetry is how soon Run tries again a write-back that failed.
	writeRetry = 5 * time.Second
)

// transportError is a call of the token endpoint that got no answer. Unless it failed to
// connect, the endpoint may have received it and spent the refresh token.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// mayBeSpent reports whether err leaves it unknown whether the refresh token was spent: the
// request may have reached the endpoint and its answer is missing.
func mayBeSpent(err error) bool {
	var te *transportError
	if !errors.As(err, &te) {
		return false // an answer: a refusal, a status, a body
	}
	var op *net.OpError
	return !(errors.As(err, &op) && op.Op == "dial")
}

// refresh is one flight.
func (m *Manager) refresh(ctx context.Context, stale string) (Tokens, error) {
	if m.platformOwned() {
		return m.readPlatform(ctx, stale)
	}
	return m.refreshOwn(ctx, stale)
}

// refreshOwn refreshes the daemon's own login holding auth.lock across the whole of it: the file
// is read again (another process may have rotated the tokens: then nothing is spent), the
// decision made, the endpoint called and the answer written back, so that nobody who follows
// the lock can spend the same refresh token meanwhile.
func (m *Manager) refreshOwn(ctx context.Context, stale string) (Tokens, error) {
	unlock, err := lockAuth(ctx, m.cfg.CodexHome, m.cfg.LockWait, m.cfg.LockHolder)
	if err != nil {
		m.mu.Lock()
		cur := m.tok
		m.mu.Unlock()
		m.setFailing(OutcomeFailed, err)
		m.log.Warn("ChatGPT token refresh not attempted: auth.lock is not free", zap.Error(err))
		return cur, fmt.Errorf("refresh the ChatGPT login: %w", err)
	}
	defer unlock()
	m.checkFile(true)
	m.mu.Lock()
	cur, dead, doubt := m.tok, m.dead, m.doubt
	m.mu.Unlock()
	now := time.Now()
	if cur.AccessToken != stale && !m.due(cur, now) {
		return cur, nil
	}
	if cur.RefreshToken == dead || cur.RefreshToken == doubt {
		return cur, m.Usable()
	}
	if err := m.pace(now); err != nil {
		return cur, err
	}
	res, err := postRefresh(ctx, m.cfg.HTTPClient, m.cfg.TokenURL, cur.RefreshToken)
	var rej *RejectedError
	switch {
	case errors.As(err, &rej):
		// Another process may have spent it first and written what it got.
		if m.checkFile(true) {
			m.mu.Lock()
			t := m.tok
			m.mu.Unlock()
			if t.RefreshToken != cur.RefreshToken {
				return t, nil
			}
		}
		m.mu.Lock()
		m.state, m.dead, m.lastOutcome, m.lastErr = StateGone, cur.RefreshToken, OutcomeRejected, rej.Error()
		m.spent[cur.RefreshToken] = true
		m.mu.Unlock()
		m.counted(OutcomeRejected)
		m.log.Error("the ChatGPT login is gone: the token endpoint refused the refresh token and auth.json holds no newer one; "+
			"every message is answered with a `codex login` hint until an operator logs codex in again",
			zap.String("codex_home", m.cfg.CodexHome), zap.Error(rej))
		return cur, fmt.Errorf("%w (%v)", ErrLoginGone, rej)
	case err != nil && mayBeSpent(err):
		why := fmt.Sprintf("the token endpoint gave no answer (%v): the refresh token may have been spent, so it is never sent again; "+
			"an operator runs `codex login` as the daemon's user (or any process writes a newer login to auth.json)", err)
		m.mu.Lock()
		m.state, m.doubt, m.lastOutcome, m.lastErr = StateUncertain, cur.RefreshToken, OutcomeUncertain, why
		m.spent[cur.RefreshToken] = true
		m.mu.Unlock()
		m.counted(OutcomeUncertain)
		m.log.Error("ChatGPT refresh in doubt", zap.String("detail", why), zap.String("codex_home", m.cfg.CodexHome))
		return cur, fmt.Errorf("%w (%s)", ErrLoginGone, why)
	case err != nil:
		m.setFailing(OutcomeFailed, err)
		m.log.Warn("ChatGPT token refresh failed (the endpoint answered; the refresh token was not spent); it is retried", zap.Error(err))
		return cur, fmt.Errorf("refresh the ChatGPT login: %w", err)
	}
	next := Tokens{IDToken: res.IDToken, AccessToken: res.AccessToken, RefreshToken: res.RefreshToken, AccountID: cur.AccountID}
	if next.IDToken == "" {
		next.IDToken = cur.IDToken
	}
	if next.RefreshToken == "" {
		next.RefreshToken = cur.RefreshToken
	}
	if err := next.readClaims(); err != nil {
		m.log.Warn("the refreshed access token's claims are unreadable; its expiry is unknown", zap.Error(err))
	}
	// The endpoint's tokens are the truth from here: held before they are written, so that a
	// failed write never brings the spent refresh token back.
	m.mu.Lock()
	if next.RefreshToken != cur.RefreshToken {
		m.spent[cur.RefreshToken] = true
	}
	m.tok, m.state, m.dead, m.lastRefresh, m.lastOutcome, m.lastErr = next, StateValid, "", now, OutcomeRefreshed, ""
	m.mu.Unlock()
	m.counted(OutcomeRefreshed)
	m.log.Info("ChatGPT login refreshed", zap.Time("expires", next.Expires))
	m.publish()
	m.writeBack(next, now)
	return next, nil
}

// writeBack writes t into auth.json (the caller holds auth.lock), keeping every other field and
// the file's mode. A failure is kept, shown and retried by Run: until then the daemon holds the
// only copy of the live refresh token.
func (m *Manager) writeBack(t Tokens, now time.Time) {
	err := func() error {
		af, err := readAuthFile(m.cfg.CodexHome)
		if err != nil {
			return fmt.Errorf("re-read %s: %w", AuthFile, err)
		}
		af.setTokens(t, now)
		return af.write(m.cfg.CodexHome)
	}()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		first := m.writeErr == ""
		m.writeErr = err.Error()
		if first {
			m.log.Error("could not write the refreshed ChatGPT login back to auth.json: the daemon holds the only copy of the live "+
				"refresh token and retries the write; the operator's own codex still has the spent one", zap.Error(err))
		}
		if m.cfg.OnRefresh != nil {
			m.cfg.OnRefresh(OutcomeWriteFailed)
		}
		select {
		case m.wake <- struct{}{}: // Run retries after writeRetry
		default:
		}
		return
	}
	if m.writeErr != "" {
		m.log.Info("the refreshed ChatGPT login was written back to auth.json")
	}
	m.writeErr = ""
	m.stamp = stampOf(m.cfg.CodexHome)
}

// pendingWrite reports whether a write-back failed and waits for its retry.
func (m *Manager) pendingWrite() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writeErr != ""
}

// retryWriteBack writes the held login to auth.json again, under the lock, unless the file now
// holds a newer one (which checkFile adopts).
func (m *Manager) retryWriteBack(ctx context.Context) {
	unlock, err := lockAuth(ctx, m.cfg.CodexHome, m.cfg.LockWait, m.cfg.LockHolder)
	if err != nil {
		m.log.Warn("write-back of the ChatGPT login waits: auth.lock is not free", zap.Error(err))
		return
	}
	defer unlock()
	m.checkFile(true)
	m.mu.Lock()
	t, pending, at := m.tok, m.writeErr != "", m.lastRefresh
	m.mu.Unlock()
	if pending {
		m.writeBack(t, at)
	}
}

// markLate records that the refresh in flight has had no answer for RequestTimeout: its answer
// is still awaited, and the callers were told so.
func (m *Manager) markLate(f *flight) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.flight != f {
		return // answered meanwhile
	}
	if m.state == StateValid {
		m.state = StateFailing
	}
	m.lastOutcome = OutcomeFailed
	m.lastErr = fmt.Sprintf("the token endpoint has not answered for %s; its answer is awaited up to %s and the refresh token is not sent again meanwhile",
		m.cfg.RequestTimeout, m.cfg.CallBound)
}

func (m *Manager) setFailing(outcome string, err error) {
	m.mu.Lock()
	if m.state == StateValid {
		m.state = StateFailing
	}
	m.lastOutcome, m.lastErr = outcome, err.Error()
	m.mu.Unlock()
	m.counted(outcome)
}

// pace refuses a token call past MaxPerMinute in the last minute: a refresh loop, which is a bug.
func (m *Manager) pace(now time.Time) error {
	m.mu.Lock()
	kept := m.calls[:0]
	for _, c := range m.calls {
		if now.Sub(c) < time.Minute {
			kept = append(kept, c)
		}
	}
	m.calls = kept
	if len(m.calls) >= m.cfg.MaxPerMinute {
		m.mu.Unlock()
		err := fmt.Errorf("refresh loop: %d token endpoint calls in the last minute (cap %d); no more until the minute is over (this is a bug: please report it)",
			len(kept), m.cfg.MaxPerMinute)
		m.setFailing(OutcomePaced, err)
		m.log.Error("ChatGPT token refresh refused by the cap per minute", zap.Error(err))
		return err
	}
	m.calls = append(m.calls, now)
	m.mu.Unlock()
	return nil
}

// due reports whether t should be refreshed now.
func (m *Manager) due(t Tokens, now time.Time) bool {
	at := m.dueAt(t)
	return !at.IsZero() && !now.Before(at)
}

// dueAt is when t is refreshed ahead of its expiry: RefreshAhead before exp, but never before
// half its life has passed (from its iat, else from when the daemon got it). Tokens that live
// less than RefreshAhead, and a host clock minutes fast, thus cost one call per half-life rather
// than a call in a loop. Zero: never (no expiry claim).
func (m *Manager) dueAt(t Tokens) time.Time {
	if t.Expires.IsZero() {
		return time.Time{}
	}
	at := t.Expires.Add(-m.cfg.RefreshAhead)
	issued := t.Issued
	if issued.IsZero() {
		issued = m.lastRefresh
	}
	if !issued.IsZero() && issued.Before(t.Expires) {
		if half := issued.Add(t.Expires.Sub(issued) / 2); half.After(at) {
			at = half
		}
	}
	return at
}

// checkFile adopts the login in auth.json when it differs from the one held and is not older:
// another process rotated the tokens, or an operator logged in again. A refresh token the
// daemon spent, or one refused, is never taken back; a file gone (`codex logout`) ends the use
// of the login. Unless force, a file whose stamp did not change is not read. It reports whether
// tokens were adopted.
func (m *Manager) checkFile(force bool) bool {
	if m.platformOwned() {
		// The platform's synced auth.json is one of its sources, read with the others.
		return false
	}
	st := stampOf(m.cfg.CodexHome)
	m.mu.Lock()
	same := st == m.stamp
	m.mu.Unlock()
	if same && !force {
		return false
	}
	af, err := readAuthFile(m.cfg.CodexHome)
	if errors.Is(err, fs.ErrNotExist) {
		m.loggedOut(st)
		return false
	}
	if err != nil || af.kind() != KindChatGPT {
		return false
	}
	t, err := af.loginTokens()
	if err != nil {
		return false
	}
	m.mu.Lock()
	m.stamp = st
	held := m.tok
	if t.RefreshToken == held.RefreshToken && t.AccessToken == held.AccessToken || m.spent[t.RefreshToken] ||
		t.RefreshToken == m.dead || Newer(held, t) && m.state != StateGone {
		m.mu.Unlock()
		return false
	}
	m.tok, m.state, m.doubt, m.writeErr, m.lastOutcome, m.lastErr = t, StateValid, "", "", OutcomeAdopted, ""
	m.mu.Unlock()
	m.counted(OutcomeAdopted)
	m.log.Info("adopted the ChatGPT login auth.json holds now (another process rotated it, or codex was logged in again)",
		zap.Time("expires", t.Expires))
	m.publish()
	return true
}

// loggedOut ends the use of a login whose auth.json is gone (`codex logout`): no refresh, and
// every message is refused with the login hint until a new login appears.
func (m *Manager) loggedOut(st fileStamp) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stamp = st
	if m.state == StateGone && m.dead == m.tok.RefreshToken {
		return
	}
	m.state, m.dead, m.lastOutcome, m.lastErr = StateGone, m.tok.RefreshToken, OutcomeRejected,
		"auth.json was removed (codex logout): the daemon stopped using the login"
	m.spent[m.tok.RefreshToken] = true
	m.log.Warn("auth.json is gone (codex logout?): the daemon no longer uses or refreshes the ChatGPT login; messages get the login hint until `codex login`",
		zap.String("codex_home", m.cfg.CodexHome))
}
