package account

// The account's usage limits. A usage limit is the account's, not a chat's: one turn that meets
// it parks every chat until the reset (DESIGN: parking is decided once for all chats).

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// LimitsFile is the file in Config.StateDir that keeps the account's usage limit across
// restarts, so that a restarted daemon parks work without spending a turn to find it out.
const LimitsFile = "limits.json"

// Bounds of parking.
const (
	// unknownResetRetry is how long work is parked when codex reported a usage limit without a
	// reset time: then a turn finds out again.
	unknownResetRetry = 5 * time.Minute
	// warnUsedPercent is the window usage logged at warn, once per window.
	warnUsedPercent = 90
	// releaseBound is how long the release of a parked message waits for the one released
	// before it to reach its turn (a child start, a thread resume) before it goes anyway.
	releaseBound = 30 * time.Second
)

// DefaultResumeSpacing is Config.ResumeSpacing's default.
const DefaultResumeSpacing = time.Second

// UsageLimitError is the error of a message the account's usage limit kept from codex: a turn
// that met it (its turn was removed from the thread again), or a message refused while the
// limit lasts (no turn ran). Nothing was answered; the same message can run after ResetsAt.
type UsageLimitError struct {
	ChatKey string
	// ResetsAt is when the limit resets, as codex reported it (or a guess UnknownReset says so).
	ResetsAt time.Time
	// UnknownReset is true when codex gave no reset time; ResetsAt is then when to try again.
	UnknownReset bool
}

func (e *UsageLimitError) Error() string {
	return fmt.Sprintf("chat %s: the account's usage limit is reached until %s", e.ChatKey, e.ResetsAt.UTC().Format(time.RFC3339))
}

// LimitWindow is one usage window of the account.
type LimitWindow struct {
	UsedPercent   float64   `json:"used_percent"`
	WindowMinutes int64     `json:"window_minutes,omitempty"`
	ResetsAt      time.Time `json:"resets_at,omitzero"`
}

// LimitCredits is the account's credits.
type LimitCredits struct {
	HasCredits bool   `json:"has_credits"`
	Unlimited  bool   `json:"unlimited"`
	Balance    string `json:"balance,omitempty"`
}

// LimitStatus is the account's usage limits as codex last reported them, and whether work is
// parked.
type LimitStatus struct {
	// Primary is the short (5-hour) window, Secondary the long (weekly) one; nil until reported.
	Primary   *LimitWindow  `json:"primary,omitempty"`
	Secondary *LimitWindow  `json:"secondary,omitempty"`
	Credits   *LimitCredits `json:"credits,omitempty"`
	// UpdatedAt is when codex last reported them.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Limited is true while the usage limit is reached: new turns are refused until ResetsAt.
	Limited  bool      `json:"limited"`
	ResetsAt time.Time `json:"resets_at,omitzero"`
	// UnknownReset: codex gave no reset time; ResetsAt is when a turn tries again.
	UnknownReset bool `json:"unknown_reset,omitempty"`
	// Parked counts messages waiting for the reset (AwaitUsable).
	Parked int `json:"parked"`
	// Hits counts the times the account ran into its usage limit.
	Hits int64 `json:"hits"`
}

// Limits follows the account's usage limits and parks work until the reset. Waiters are
// released oldest first, one every spacing and each only once the one before it reached its
// turn (or releaseBound passed), so that the reset is not met by every parked message at once
// and the turns start in the order the messages came; a released turn that meets the limit
// again moves the reset, and the rest keep waiting for the new one.
type Limits struct {
	path    string // "" keeps nothing on disk
	spacing time.Duration
	log     *zap.Logger

	mu      sync.Mutex
	st      LimitStatus
	waiters []*limitWaiter
	seq     uint64
	timer   *time.Timer
	// nextRelease is the earliest a waiter may be released after the previous one.
	nextRelease time.Time
	// released is the chat key of the last waiter released until its turn begins (reached);
	// releasedAt is when it was released.
	released   string
	releasedAt time.Time
}

type limitWaiter struct {
	key   string
	since time.Time
	seq   uint64
	ready chan struct{}
}

// limitRecord is what LimitsFile holds.
type limitRecord struct {
	ResetsAt     time.Time   `json:"resets_at,omitzero"`
	UnknownReset bool        `json:"unknown_reset,omitempty"`
	Hits         int64       `json:"hits"`
	Status       LimitStatus `json:"rate_limits"`
}

func NewLimits(stateDir string, spacing time.Duration, log *zap.Logger) *Limits {
	l := &Limits{spacing: spacing, log: log}
	if stateDir == "" {
		return l
	}
	l.path = filepath.Join(stateDir, LimitsFile)
	b, err := atomicfile.ReadFile(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return l
	}
	var rec limitRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		// Only a cache of what codex says: the next turn that meets the limit says it again.
		log.Warn("the usage-limit file is unreadable; starting without it", zap.String("path", l.path), zap.Error(err))
		return l
	}
	l.st = rec.Status
	l.st.Parked = 0
	l.st.ResetsAt, l.st.UnknownReset, l.st.Hits = rec.ResetsAt, rec.UnknownReset, rec.Hits
	if time.Now().Before(l.st.ResetsAt) {
		l.st.Limited = true
		log.Warn("the account's usage limit, recorded before the restart, lasts: work is parked until the reset",
			zap.Time("resets_at", l.st.ResetsAt))
	}
	return l
}

// status is the current LimitStatus.
func (l *Limits) Status() LimitStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.st
	st.Limited = st.Limited && time.Now().Before(st.ResetsAt)
	st.Parked = len(l.waiters)
	return st
}

// refusing reports the reset while the limit lasts: a new turn is not started before it.
func (l *Limits) Refusing() (resetsAt time.Time, unknown, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.st.Limited || !time.Now().Before(l.st.ResetsAt) {
		return time.Time{}, false, false
	}
	return l.st.ResetsAt, l.st.UnknownReset, true
}

// update merges a rate-limit report of codex (sparse: what is missing is kept) and logs a window
// that passed warnUsedPercent, once per window. It writes nothing: every answer of the model
// brings a report, and the next one after a restart says the same; LimitsFile is written when
// the limit is met or ends.
func (l *Limits) Update(rl protocol.RateLimitSnapshot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.Primary = mergeWindow(l.st.Primary, rl.Primary, "primary", l.log)
	l.st.Secondary = mergeWindow(l.st.Secondary, rl.Secondary, "secondary", l.log)
	if c := rl.Credits; c != nil {
		lc := &LimitCredits{HasCredits: c.HasCredits, Unlimited: c.Unlimited}
		if c.Balance != nil {
			lc.Balance = *c.Balance
		}
		l.st.Credits = lc
	}
	l.st.UpdatedAt = time.Now()
}

// mergeWindow is old updated by w (nil: no news of the window).
func mergeWindow(old *LimitWindow, w *protocol.RateLimitWindow, name string, log *zap.Logger) *LimitWindow {
	if w == nil {
		return old
	}
	nw := &LimitWindow{UsedPercent: w.UsedPercent}
	if old != nil {
		nw.WindowMinutes, nw.ResetsAt = old.WindowMinutes, old.ResetsAt
	}
	if w.WindowDurationMins != nil {
		nw.WindowMinutes = *w.WindowDurationMins
	}
	if w.ResetsAt != nil && *w.ResetsAt > 0 {
		nw.ResetsAt = time.Unix(*w.ResetsAt, 0)
	}
	// Once per window: a window that was below the mark, or a new window (another reset).
	if nw.UsedPercent >= warnUsedPercent && (old == nil || old.UsedPercent < warnUsedPercent || !old.ResetsAt.Equal(nw.ResetsAt)) {
		log.Warn("a usage window of the account is nearly used up", zap.String("window", name),
			zap.Float64("used_percent", nw.UsedPercent), zap.Int64("window_minutes", nw.WindowMinutes), zap.Time("resets_at", nw.ResetsAt))
	}
	return nw
}

// hit records a turn that met the usage limit; resetsAt zero means codex gave no reset time.
// It returns the error for the turn's message.
func (l *Limits) Hit(chatKey string, resetsAt time.Time) *UsageLimitError {
	l.mu.Lock()
	defer l.mu.Unlock()
	unknown := resetsAt.IsZero()
	if unknown {
		resetsAt = time.Now().Add(unknownResetRetry)
	}
	first := !l.st.Limited || !time.Now().Before(l.st.ResetsAt)
	if first || resetsAt.After(l.st.ResetsAt) {
		l.st.ResetsAt, l.st.UnknownReset = resetsAt, unknown
	}
	l.st.Limited = true
	if first {
		l.st.Hits++
		l.log.Warn("the account's usage limit is reached: work is parked until the reset",
			zap.String("chat_key", chatKey), zap.Time("resets_at", l.st.ResetsAt), zap.Bool("reset_unknown", unknown))
	}
	if l.released == chatKey {
		l.released = "" // it reached its turn, and met the limit again
	}
	l.saveLocked()
	l.armLocked()
	return &UsageLimitError{ChatKey: chatKey, ResetsAt: l.st.ResetsAt, UnknownReset: l.st.UnknownReset}
}

// cleared records a turn the model answered: whatever the limit said, the account takes work.
func (l *Limits) Cleared() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.st.Limited {
		return
	}
	l.log.Info("the account takes work again after its usage limit", zap.Int("parked", len(l.waiters)))
	l.st.Limited = false
	l.saveLocked()
	l.armLocked()
}

// await blocks until the limit is past and the caller's turn comes: callers are released in the
// order of since (then of arrival), one every spacing, each once the one before reached its
// turn (see Limits). It returns at once when nothing is parked and a release is due.
func (l *Limits) Await(ctx context.Context, chatKey string, since time.Time) error {
	l.mu.Lock()
	if l.releasableLocked(time.Now()) && len(l.waiters) == 0 {
		l.markReleasedLocked(chatKey, time.Now())
		l.mu.Unlock()
		l.log.Info("a parked message goes ahead", zap.String("chat_key", chatKey), zap.Time("arrived", since), zap.Int("still_parked", 0))
		return nil
	}
	l.seq++
	w := &limitWaiter{key: chatKey, since: since, seq: l.seq, ready: make(chan struct{})}
	i, _ := slices.BinarySearchFunc(l.waiters, w, func(a, b *limitWaiter) int {
		if c := a.since.Compare(b.since); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	l.waiters = slices.Insert(l.waiters, i, w)
	l.armLocked()
	l.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		if j := slices.Index(l.waiters, w); j >= 0 {
			l.waiters = slices.Delete(l.waiters, j, j+1)
		} else if l.released == w.key {
			// Released as ctx ended: its turn will not come, so the next need not wait for it.
			l.released = ""
			l.armLocked()
		}
		return context.Cause(ctx)
	}
}

// releasableLocked reports whether a waiter may go at now: the limit is past, spacing passed
// since the last release, and that one reached its turn (or releaseBound passed).
func (l *Limits) releasableLocked(now time.Time) bool {
	return !(l.st.Limited && now.Before(l.st.ResetsAt)) && !now.Before(l.nextRelease) &&
		(l.released == "" || now.Sub(l.releasedAt) >= releaseBound)
}

func (l *Limits) markReleasedLocked(chatKey string, now time.Time) {
	l.nextRelease = now.Add(l.spacing)
	l.released, l.releasedAt = chatKey, now
}

// reached records that chatKey's message reached its turn (or was refused again): the next
// waiter may go.
func (l *Limits) Reached(chatKey string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released == "" || l.released != chatKey {
		return
	}
	l.released = ""
	l.armLocked()
}

// armLocked sets the release timer for the next waiter: at the reset while the limit lasts,
// else at nextRelease, or when the last release's bound passes.
func (l *Limits) armLocked() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if len(l.waiters) == 0 {
		return
	}
	at := l.nextRelease
	if l.st.Limited && l.st.ResetsAt.After(at) {
		at = l.st.ResetsAt
	}
	if l.released != "" && l.releasedAt.Add(releaseBound).After(at) {
		at = l.releasedAt.Add(releaseBound) // reached re-arms it sooner
	}
	l.timer = time.AfterFunc(time.Until(at), l.release)
}

// release lets the oldest waiter go, if it may, and arms the timer for the next.
func (l *Limits) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if len(l.waiters) > 0 && l.releasableLocked(now) {
		w := l.waiters[0]
		close(w.ready)
		l.waiters = slices.Delete(l.waiters, 0, 1)
		l.markReleasedLocked(w.key, now)
		l.log.Info("a parked message goes ahead", zap.String("chat_key", w.key), zap.Time("arrived", w.since),
			zap.Int("still_parked", len(l.waiters)))
	}
	l.armLocked()
}

// stop ends the release timer (Shutdown).
func (l *Limits) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
}

// saveLocked writes LimitsFile. A failure is logged: the file only spares a restarted daemon
// one turn that meets the limit.
func (l *Limits) saveLocked() {
	if l.path == "" {
		return
	}
	rec := limitRecord{ResetsAt: l.st.ResetsAt, UnknownReset: l.st.UnknownReset, Hits: l.st.Hits, Status: l.st}
	if !l.st.Limited {
		rec.ResetsAt, rec.UnknownReset = time.Time{}, false
	}
	rec.Status.Parked, rec.Status.Limited = 0, false
	b, err := json.MarshalIndent(rec, "", "  ")
	if err == nil {
		err = atomicfile.WriteFile(l.path, append(b, '\n'), atomicfile.Options{})
	}
	if err != nil {
		l.log.Warn("could not write the usage-limit file", zap.String("path", l.path), zap.Error(err))
	}
}
