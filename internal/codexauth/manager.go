// Package codexauth makes the daemon the only holder of a ChatGPT login shared by many codex
// children. codex refreshes its own login per process, and the flock it takes covers only the
// file, not the network call: N warm children meeting a 401 together spend one refresh token N
// times, and all but one are refused (refresh_token_reused) and report the login as gone. So
// the daemon reads CODEX_HOME/auth.json itself, starts every child with an ephemeral credential
// store and the access token (app-server's client-owned tokens), refreshes once for all of
// them, pushes each new token to every live child, and writes the rotated tokens back the way
// codex does, so the operator's own codex keeps working.
//
// A login the platform owns (Config.Platform: a Molecule workspace's CODEX_AUTH_JSON, rotated
// by the platform alone) is only read, from the sources the caller wires, and handed out; the
// daemon never refreshes it. A login the daemon owns is refreshed under auth.lock held across
// the whole refresh, its newest tokens kept in memory whatever the disk does, a late answer
// awaited rather than its refresh token sent again (docs/login.md).
//
// The wire facts are in docs/PROTOCOL.md ("ChatGPT login shared by many children").
package codexauth

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// Defaults of zero Config fields.
const (
	// DefaultRequestTimeout bounds one call of the token endpoint. A child waits 10 s for the
	// answer to its refresh request; this leaves room to answer it in time.
	DefaultRequestTimeout = 8 * time.Second
	// DefaultRefreshAhead is how long before the access token's exp it is refreshed: codex
	// itself refreshes within 5 minutes of exp.
	DefaultRefreshAhead = 5 * time.Minute
	// DefaultFileCheck is how often auth.json is looked at for a login another process wrote
	// (an operator's `codex login`, a second daemon).
	DefaultFileCheck = 30 * time.Second
	// DefaultRetryMax caps the wait between refreshes that failed without an answer.
	DefaultRetryMax = time.Minute
)

// State is where the login stands.
type State string

// States of the login. Valid → Failing when a refresh gets no answer (the token may still be
// good, and the refresh is retried); Valid or Failing → Gone when the endpoint refuses the
// refresh token for good and auth.json has nothing newer; any → Valid when a refresh succeeds
// or auth.json brings a new login.
const (
	StateValid   State = "valid"
	StateFailing State = "refresh_failing"
	StateGone    State = "login_gone"
	// StateUncertain: a refresh call got no answer within Config.CallBound (or lost it) and may
	// have spent the refresh token; it is never sent again. A newer login in auth.json (a new
	// `codex login`, another process's refresh) ends it.
	StateUncertain State = "refresh_uncertain"
)

// Refresh outcomes, as counted in metrics.
const (
	OutcomeRefreshed = "refreshed" // the endpoint rotated the tokens
	OutcomeAdopted   = "adopted"   // auth.json held newer tokens (another process rotated them)
	OutcomeRejected  = "rejected"  // the endpoint refused the refresh token for good
	OutcomeFailed    = "failed"    // no usable answer; the refresh token was not spent
	// OutcomeUncertain: no answer in time, or the answer lost: the refresh token may be spent.
	OutcomeUncertain = "uncertain"
	// OutcomeWriteFailed: the rotated login could not be written back to auth.json (retried).
	OutcomeWriteFailed = "write_back_failed"
	// OutcomePaced: a refresh refused by the hard cap per minute (a loop, which is a bug).
	OutcomePaced = "paced"
)

// ErrLoginGone means the refresh token was refused for good and auth.json holds nothing newer:
// an operator must run `codex login`.
var ErrLoginGone = errors.New("the ChatGPT login is gone: an operator must run `codex login` as the daemon's user")

// Config configures a Manager.
type Config struct {
	// CodexHome is the CODEX_HOME of the children. Required.
	CodexHome string
	// TokenURL is the OAuth token endpoint. Empty means TokenURLEnv from the environment the
	// daemon was given, else DefaultTokenURL (see TokenURLFrom).
	TokenURL string
	// HTTPClient calls the endpoint. Nil means NoRedirectClient().
	HTTPClient *http.Client
	// RequestTimeout bounds one call of the endpoint. Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// RefreshAhead is how long before exp the access token is refreshed. Default
	// DefaultRefreshAhead.
	RefreshAhead time.Duration
	// FileCheck is how often Run looks for a newer auth.json. Default DefaultFileCheck.
	FileCheck time.Duration
	// RetryMax caps the backoff between failed refreshes in Run. Default DefaultRetryMax.
	RetryMax time.Duration
	// LockWait bounds the wait for auth.lock. Default DefaultLockWait.
	LockWait time.Duration
	// LockHolder names the process holding auth.lock when the wait runs out (LockHeldError);
	// nil: it is not named.
	LockHolder LockHolderFunc
	// CallBound is how long a refresh call's answer is awaited, off the children's path, before
	// its refresh token is held in doubt. Default DefaultCallBound.
	CallBound time.Duration
	// MaxPerMinute caps token endpoint calls in any minute. Default DefaultMaxPerMinute.
	MaxPerMinute int
	// Platform, when not empty, makes the login the platform's (OwnerPlatform): the daemon
	// reads it from these sources, the newest wins, and never calls the token endpoint nor
	// writes auth.json. Empty: the login in CodexHome/auth.json is the daemon's own.
	Platform []Source
	// PlatformCheck is how often Run reads the platform's login again. Default
	// DefaultPlatformCheck.
	PlatformCheck time.Duration
	// OnRefresh, when set, hears each refresh's outcome (Outcome*). It must not block.
	OnRefresh func(outcome string)
	// Logger receives the manager's logs. Nil: none.
	Logger *zap.Logger
	// Carried is what the previous image of the daemon knew of the login (Manager.Carry), when
	// this one was started by a reload: the refresh tokens never to send again.
	Carried Carried
}

// TokenURLFrom is the token endpoint codex would call in an environment whose variables getenv
// reads: TokenURLEnv when set, else DefaultTokenURL.
func TokenURLFrom(getenv func(string) string) string {
	if u := getenv(TokenURLEnv); u != "" {
		return u
	}
	return DefaultTokenURL
}

// Status is what an operator sees of the login. It never holds a token.
type Status struct {
	Kind Kind `json:"kind"`
	// Owner is who renews the login: OwnerDaemon or OwnerPlatform.
	Owner string `json:"owner"`
	// Source names where a login the platform owns was last read from.
	Source      string    `json:"source,omitempty"`
	State       State     `json:"state"`
	AccountID   string    `json:"account_id,omitempty"`
	PlanType    string    `json:"plan_type,omitempty"`
	Expires     time.Time `json:"expires,omitzero"`
	LastRefresh time.Time `json:"last_refresh,omitzero"`
	LastOutcome string    `json:"last_outcome,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	// WriteBackError is set while the rotated login could not be written back to auth.json: the
	// daemon holds the only copy of the live refresh token, and retries the write.
	WriteBackError string `json:"write_back_error,omitempty"`
}

// Manager holds a ChatGPT login for every child of the daemon; see the package doc.
//
// Goroutines: each refresh runs on a goroutine of its own (callers only wait for it, so a
// caller giving up never cancels a call that may already have spent the refresh token); Close
// waits for them. Run is the caller's.
type Manager struct {
	cfg Config
	log *zap.Logger

	life context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu          sync.Mutex
	tok         Tokens
	state       State
	stamp       fileStamp // of the auth.json tok was last read from or written to
	lastRefresh time.Time
	lastOutcome string
	lastErr     string
	source      string // where a login the platform owns was read from
	dead        string // a refresh token the endpoint refused for good
	doubt       string // a refresh token a call may have spent without an answer
	spent       map[string]bool
	writeErr    string        // the last failed write-back, while it is pending
	calls       []time.Time   // token endpoint calls in the last minute
	wake        chan struct{} // wakes Run: a write-back to retry
	flight      *flight       // the refresh in progress, if any
	held        int           // Hold calls not released: no refresh starts
	subs        map[int]func()
	nextSub     int
}

// flight is one refresh that every caller asking meanwhile shares.
type flight struct {
	stale string // the access token that was found wanting
	done  chan struct{}
	tok   Tokens
	err   error
}

// fileStamp tells whether auth.json changed since it was last read.
type fileStamp struct {
	ino   uint64
	size  int64
	mtime time.Time
}

// Open reads CODEX_HOME/auth.json. For a ChatGPT login it returns a Manager holding its tokens;
// for any other kind (no file, an API key, ...) it returns nil and the kind, and codex keeps
// managing that login itself.
func Open(cfg Config) (*Manager, Kind, error) {
	if cfg.CodexHome == "" {
		return nil, KindNone, errors.New("codexauth: Config.CodexHome is empty")
	}
	if cfg.TokenURL == "" {
		cfg.TokenURL = TokenURLFrom(os.Getenv)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = NoRedirectClient()
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.RefreshAhead <= 0 {
		cfg.RefreshAhead = DefaultRefreshAhead
	}
	if cfg.FileCheck <= 0 {
		cfg.FileCheck = DefaultFileCheck
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = DefaultRetryMax
	}
	if cfg.LockWait <= 0 {
		cfg.LockWait = DefaultLockWait
	}
	if cfg.CallBound <= 0 {
		cfg.CallBound = DefaultCallBound
	}
	if cfg.MaxPerMinute <= 0 {
		cfg.MaxPerMinute = DefaultMaxPerMinute
	}
	if cfg.PlatformCheck <= 0 {
		cfg.PlatformCheck = DefaultPlatformCheck
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if len(cfg.Platform) > 0 {
		m, err := openPlatform(cfg)
		if err != nil {
			return nil, KindChatGPT, err
		}
		return m, KindChatGPT, nil
	}
	af, err := readAuthFile(cfg.CodexHome)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, KindNone, nil
	}
	if err != nil {
		return nil, KindNone, fmt.Errorf("read codex login: %w", err)
	}
	kind := af.kind()
	if kind != KindChatGPT {
		return nil, kind, nil
	}
	tok, err := af.loginTokens()
	if err != nil {
		return nil, kind, fmt.Errorf("read codex login %s: %w", filepath.Join(cfg.CodexHome, AuthFile), err)
	}
	m := &Manager{cfg: cfg, log: cfg.Logger.Named("codexauth"), tok: tok, state: StateValid,
		stamp: stampOf(cfg.CodexHome), subs: map[int]func(){}, spent: map[string]bool{}, wake: make(chan struct{}, 1)}
	m.take(cfg.Carried)
	if af.mode&0o077 != 0 {
		m.log.Warn("auth.json is readable by other users: it holds the ChatGPT refresh token (chmod 600 it)",
			zap.String("path", filepath.Join(cfg.CodexHome, AuthFile)), zap.String("mode", fmt.Sprintf("%04o", af.mode)))
	}
	m.life, m.stop = context.WithCancel(context.Background())
	return m, kind, nil
}

// WaitIdle waits until no refresh is in progress, or ctx is done.
func (m *Manager) WaitIdle(ctx context.Context) error {
	m.mu.Lock()
	f := m.flight
	m.mu.Unlock()
	if f == nil {
		return nil
	}
	select {
	case <-f.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops every refresh in progress and waits for it.
func (m *Manager) Close() {
	m.stop()
	m.wg.Wait()
}

// Login is the current access token, as account/login/start sends it.
func (m *Manager) Login() protocol.ChatGPTAuthTokens {
	m.mu.Lock()
	defer m.mu.Unlock()
	return loginOf(m.tok)
}

// Usable returns ErrLoginGone (wrapped with the cause) while the login is gone, after looking
// at auth.json once more for a new login; nil otherwise.
func (m *Manager) Usable() error {
	m.checkFile(false)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == StateGone || m.state == StateUncertain {
		return fmt.Errorf("%w (%s)", ErrLoginGone, m.lastErr)
	}
	return nil
}

// Status is the login as an operator sees it.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	owner := OwnerDaemon
	if m.platformOwned() {
		owner = OwnerPlatform
	}
	return Status{Kind: KindChatGPT, Owner: owner, Source: m.source, State: m.state, AccountID: m.tok.AccountID, PlanType: m.tok.PlanType,
		Expires: m.tok.Expires, LastRefresh: m.lastRefresh, LastOutcome: m.lastOutcome, LastError: m.lastErr,
		WriteBackError: m.writeErr}
}

// Subscribe calls kick, which must not block, each time the access token changes; the
// subscriber reads it with Login. stop ends the subscription.
func (m *Manager) Subscribe(kick func()) (stop func()) {
	m.mu.Lock()
	id := m.nextSub
	m.nextSub++
	m.subs[id] = kick
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		delete(m.subs, id)
		m.mu.Unlock()
	}
}

// Refresh answers a child whose access token stale was refused: a newer token at once when the
// daemon has one, else the outcome of one refresh that every caller asking meanwhile shares.
// ctx bounds only the wait: the refresh itself runs on, bounded by Config.RequestTimeout,
// because the endpoint may already have spent the refresh token.
func (m *Manager) Refresh(ctx context.Context, stale string) (protocol.ChatGPTAuthTokens, error) {
	if err := m.Usable(); err != nil {
		return protocol.ChatGPTAuthTokens{}, err
	}
	m.mu.Lock()
	if m.tok.AccessToken != stale {
		t := m.tok
		m.mu.Unlock()
		return loginOf(t), nil
	}
	if m.held > 0 {
		m.mu.Unlock()
		return protocol.ChatGPTAuthTokens{}, ErrHeld
	}
	f := m.startLocked(stale)
	m.mu.Unlock()
	wait := time.NewTimer(m.cfg.RequestTimeout)
	defer wait.Stop()
	select {
	case <-f.done:
		if f.err != nil {
			return protocol.ChatGPTAuthTokens{}, f.err
		}
		return loginOf(f.tok), nil
	case <-wait.C:
		m.markLate(f)
		return protocol.ChatGPTAuthTokens{}, fmt.Errorf("the ChatGPT token refresh has no answer after %s; it is awaited up to %s and its refresh token is not sent again meanwhile",
			m.cfg.RequestTimeout, m.cfg.CallBound)
	case <-ctx.Done():
		return protocol.ChatGPTAuthTokens{}, fmt.Errorf("waiting for the ChatGPT token refresh: %w", context.Cause(ctx))
	}
}

// startLocked returns the refresh in progress, or starts one for stale. m.mu is held.
func (m *Manager) startLocked(stale string) *flight {
	if m.flight != nil {
		return m.flight
	}
	f := &flight{stale: stale, done: make(chan struct{})}
	m.flight = f
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		// The lock's wait and the call's bound; the callers wait RequestTimeout at most.
		ctx, cancel := context.WithTimeout(m.life, m.cfg.LockWait+m.cfg.CallBound)
		defer cancel()
		late := time.AfterFunc(m.cfg.RequestTimeout, func() { m.markLate(f) })
		f.tok, f.err = m.refresh(ctx, stale)
		late.Stop()
		m.mu.Lock()
		m.flight = nil
		m.mu.Unlock()
		close(f.done)
	}()
	return f
}

// Run refreshes the access token RefreshAhead before it expires, and picks up a login another
// process wrote to auth.json, until ctx is done. Failed refreshes are retried with a backoff.
func (m *Manager) Run(ctx context.Context) {
	if m.platformOwned() {
		m.runPlatform(ctx)
		return
	}
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval, retry.MaxInterval, retry.MaxElapsedTime = time.Second, m.cfg.RetryMax, 0
	var retryAt time.Time
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.wake:
			// A write-back failed: sleep writeRetry from now, not until the next file check.
			t.Reset(m.nextWake(time.Now(), retryAt))
			continue
		}
		m.checkFile(false)
		now := time.Now()
		m.mu.Lock()
		cur, state := m.tok, m.state
		m.mu.Unlock()
		if m.pendingWrite() {
			m.retryWriteBack(ctx)
		}
		if state != StateGone && state != StateUncertain && m.due(cur, now) && !now.Before(retryAt) {
			if _, err := m.Refresh(ctx, cur.AccessToken); err != nil && !errors.Is(err, ErrLoginGone) {
				retryAt = time.Now().Add(retry.NextBackOff())
			} else {
				retry.Reset()
				retryAt = time.Time{}
			}
		}
		t.Reset(m.nextWake(time.Now(), retryAt))
	}
}

// nextWake is how long Run sleeps: until the next refresh is due (or may be retried), or the
// next look at auth.json, whichever is first.
func (m *Manager) nextWake(now, retryAt time.Time) time.Duration {
	wait := m.cfg.FileCheck
	m.mu.Lock()
	t, state := m.tok, m.state
	m.mu.Unlock()
	if m.pendingWrite() {
		wait = min(wait, writeRetry)
	}
	if state == StateGone || state == StateUncertain || t.Expires.IsZero() {
		return wait
	}
	at := m.dueAt(t)
	if retryAt.After(at) {
		at = retryAt
	}
	if d := at.Sub(now); d < wait {
		wait = max(d, 0)
	}
	return wait
}

func (m *Manager) publish() {
	m.mu.Lock()
	kicks := make([]func(), 0, len(m.subs))
	for _, k := range m.subs {
		kicks = append(kicks, k)
	}
	m.mu.Unlock()
	for _, k := range kicks {
		k()
	}
}

func (m *Manager) counted(outcome string) {
	if m.cfg.OnRefresh != nil {
		m.cfg.OnRefresh(outcome)
	}
}

func loginOf(t Tokens) protocol.ChatGPTAuthTokens {
	l := protocol.ChatGPTAuthTokens{Type: protocol.LoginTypeChatGPTAuthTokens, AccessToken: t.AccessToken, ChatGPTAccountID: t.AccountID}
	if t.PlanType != "" {
		plan := t.PlanType
		l.ChatGPTPlanType = &plan
	}
	return l
}

func stampOf(dir string) fileStamp {
	// The file itself, through a link: a rotation of a shared file changes its stamp.
	fi, err := os.Stat(filepath.Join(dir, AuthFile))
	if err != nil {
		return fileStamp{}
	}
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st
}
