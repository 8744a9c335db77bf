package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
	"github.com/molecule-ai/codex-warm/internal/retention"
	"github.com/molecule-ai/codex-warm/supervisor/account"
)

// ReasonArchived: the chat's idle child was retired so that its thread could be archived.
const ReasonArchived = "archived"

// DefaultRetentionEvery is how often the retention sweep runs when Config.RetentionEvery is 0.
const DefaultRetentionEvery = time.Hour

// ErrNoRetention is returned by ArchiveSweep when the supervisor has no Config.Retention.
var ErrNoRetention = errors.New("no archive log (state dir)")

// SweepResult says what one ArchiveSweep did (or, DryRun, would do).
type SweepResult struct {
	DryRun   bool                  `json:"dry_run,omitempty"`
	Archived []retention.Candidate `json:"archived,omitempty"`
	Deleted  []retention.Candidate `json:"deleted,omitempty"`
	// Busy are chats due to be archived that had a turn running or messages waiting: left for
	// the next sweep.
	Busy   []string `json:"busy,omitempty"`
	Errors []string `json:"errors,omitempty"`
	// Uploads is what was removed of the files users sent: the deleted chats' and those past
	// Policy.UploadsAfter.
	Uploads chatfiles.Removed `json:"uploads"`
}

// snapshotter is the ThreadStore's listing (*sessions.Store has it).
type snapshotter interface{ Snapshot() map[string]string }

// archiver is the retention part: the archive sweep and its loop, a chat's leaving of its
// thread, and a returning chat's archived thread. It owns sweepMu; what it needs of the pool
// and the chat path comes through slot and onWorker, which the Supervisor wires in New.
type archiver struct {
	cfg   *Config // the supervisor's, read only
	log   *zap.Logger
	usage *account.Usage
	// slot takes a child slot (honouring MaxChildren and the memory budget); release frees it.
	slot func(ctx context.Context) (release func(), err error)
	// onWorker runs fn on chatKey's worker, unless the chat has a turn running or messages
	// waiting (busy); retire retires the chat's child and waits until it was reaped.
	onWorker func(ctx context.Context, chatKey string, fn func(k *keyState, retire func()) error) (busy bool, err error)

	// sweepMu lets one ArchiveSweep run at a time.
	sweepMu sync.Mutex
}

func newArchiver(cfg *Config, log *zap.Logger, usage *account.Usage,
	slot func(context.Context) (func(), error),
	onWorker func(context.Context, string, func(*keyState, func()) error) (bool, error)) *archiver {
	return &archiver{cfg: cfg, log: log, usage: usage, slot: slot, onWorker: onWorker}
}

// lastTurn is when chatKey's last turn ended, as kept with its token totals.
func (s *archiver) lastTurn(chatKey string) (time.Time, bool) {
	at := s.usage.Chat(chatKey).LastTurnAt
	return at, !at.IsZero()
}

// ArchiveSweep archives the threads of chats idle p.IdleAfter or more and deletes threads
// archived p.DeleteAfter or more ago (a zero duration: that part is off). A chat with a turn
// running or messages waiting is left for the next sweep; a chat's idle child is retired first
// (codex refuses to archive a thread another child holds). The calls go to one maintenance
// child the sweep starts when there is work, which takes a slot like any child (so the sweep
// honours MaxChildren and the memory budget, waiting at most SlotWait) and is closed at the
// end. One sweep runs at a time.
func (s *Supervisor) ArchiveSweep(ctx context.Context, p retention.Policy, dryRun bool) (SweepResult, error) {
	return s.archive.sweep(ctx, p, dryRun)
}

// sweep is ArchiveSweep.
func (s *archiver) sweep(ctx context.Context, p retention.Policy, dryRun bool) (SweepResult, error) {
	l := s.cfg.Retention
	snap, ok := s.cfg.Store.(snapshotter)
	if l == nil || !ok {
		return SweepResult{}, ErrNoRetention
	}
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	plan := l.Plan(p, snap.Snapshot(), s.lastTurn)
	res := SweepResult{DryRun: dryRun}
	if dryRun {
		res.Archived, res.Deleted = plan.Archive, plan.Delete
		return res, nil
	}
	if len(plan.Archive)+len(plan.Delete) > 0 {
		if err := s.sweepThreads(ctx, p, plan, &res); err != nil {
			return res, err
		}
	}
	s.pruneUploads(&res, p)
	return res, nil
}

// sweepThreads archives and deletes what plan lists, on a maintenance child.
func (s *archiver) sweepThreads(ctx context.Context, p retention.Policy, plan retention.Plan, res *SweepResult) error {
	l := s.cfg.Retention
	codex, done, err := s.maintenanceChild(ctx)
	if err != nil {
		return fmt.Errorf("retention sweep: %w", err)
	}
	defer done()
	for _, c := range plan.Archive {
		if c.Left {
			s.archiveLeft(ctx, codex, c, p.IdleAfter, res)
			continue
		}
		busy, err := s.archiveChat(ctx, codex, c, p.IdleAfter)
		switch {
		case busy:
			res.Busy = append(res.Busy, c.ChatKey)
		case err != nil:
			res.Errors = append(res.Errors, err.Error())
			s.log.Warn("could not archive an idle chat's thread", zap.String("chat_key", c.ChatKey),
				zap.String("thread_id", c.ThreadID), zap.Error(err))
		default:
			res.Archived = append(res.Archived, c)
			s.log.Info("archived an idle chat's thread", zap.String("chat_key", c.ChatKey),
				zap.String("thread_id", c.ThreadID), zap.Time("last_turn_at", c.Since))
		}
	}
	for _, c := range plan.Delete {
		del := func() error { return l.Delete(ctx, codex, c.ChatKey) }
		if c.Left {
			del = func() error { return l.DeleteLeft(ctx, codex, c.ThreadID) }
		}
		if err := del(); err != nil {
			res.Errors = append(res.Errors, err.Error())
			s.log.Warn("could not delete an archived thread", zap.String("chat_key", c.ChatKey),
				zap.String("thread_id", c.ThreadID), zap.Error(err))
			continue
		}
		res.Deleted = append(res.Deleted, c)
		s.log.Info("deleted an archived thread for good", zap.String("chat_key", c.ChatKey),
			zap.String("thread_id", c.ThreadID), zap.Bool("left", c.Left))
	}
	return nil
}

// archiveLeft archives c, a thread its chat left. No child holds it (the chat's child was
// retired when it left, and its new thread is another), so the chat's queue is not involved.
func (s *archiver) archiveLeft(ctx context.Context, codex retention.Codex, c retention.Candidate, idleAfter time.Duration, res *SweepResult) {
	reason := fmt.Sprintf("left since %s (archive after %s)", c.Since.UTC().Format(time.RFC3339), idleAfter)
	if err := s.cfg.Retention.ArchiveLeft(ctx, codex, c.ThreadID, reason); err != nil {
		res.Errors = append(res.Errors, err.Error())
		s.log.Warn("could not archive a thread a chat left", zap.String("chat_key", c.ChatKey),
			zap.String("thread_id", c.ThreadID), zap.Error(err))
		return
	}
	res.Archived = append(res.Archived, c)
	s.log.Info("archived a thread a chat left", zap.String("chat_key", c.ChatKey),
		zap.String("thread_id", c.ThreadID), zap.Time("left_at", c.Since))
}

// leftThread tells the archive log that chatKey left threadID (sessions.Store.Archive wrote
// the line), so that the next sweep counts its age.
func (s *archiver) leftThread(chatKey, threadID string) {
	if s.cfg.Retention != nil {
		s.cfg.Retention.Left(chatKey, threadID, time.Now())
	}
}

// pruneUploads removes the uploads of the chats res deleted and, with p.UploadsAfter, every
// upload older than that.
func (s *archiver) pruneUploads(res *SweepResult, p retention.Policy) {
	if s.cfg.WorkDir == "" {
		return
	}
	add := func(rm chatfiles.Removed, err error) {
		res.Uploads.Files += rm.Files
		res.Uploads.Bytes += rm.Bytes
		if err != nil {
			res.Errors = append(res.Errors, err.Error())
			s.log.Warn("could not remove uploads", zap.Error(err))
		}
	}
	for _, c := range res.Deleted {
		if !c.Left { // the chat of a left thread goes on, with its files
			add(chatfiles.RemoveUploads(s.cfg.WorkDir, c.ChatKey))
		}
	}
	if p.UploadsAfter > 0 {
		add(chatfiles.PruneUploads(s.cfg.WorkDir, time.Now().Add(-p.UploadsAfter)))
	}
	if res.Uploads.Files > 0 {
		s.log.Info("removed uploads", zap.Int("files", res.Uploads.Files), zap.Int64("bytes", res.Uploads.Bytes))
	}
}

// maintenanceChild starts a child for retention calls under a slot of its own; done closes it
// and frees the slot.
func (s *archiver) maintenanceChild(ctx context.Context) (retention.Codex, func(), error) {
	release, err := s.slot(ctx)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeoutCause(ctx, s.cfg.HandshakeTimeout, handshakeCause(s.cfg.HandshakeTimeout))
	child, err := s.cfg.Spawn(sctx, "")
	cancel()
	if err == nil && child == nil {
		err = errors.New("spawn returned no child")
	}
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("start a maintenance child: %w", err)
	}
	codex, ok := child.(retention.Codex)
	if !ok {
		child.Close()
		release()
		return nil, nil, fmt.Errorf("child pid %d cannot archive threads", child.PID())
	}
	return codex, func() { child.Close(); release() }, nil
}

// archiveChat archives c on the chat's own worker, so that no message of the chat runs
// meanwhile; a message that arrives waits and then finds the chat archived and brings it back.
// busy is true when the chat had work: it is left alone.
func (s *archiver) archiveChat(ctx context.Context, codex retention.Codex, c retention.Candidate, idleAfter time.Duration) (busy bool, err error) {
	return s.onWorker(ctx, c.ChatKey, func(k *keyState, retire func()) error {
		// Checked again on the worker: a turn may have ended between the plan and now.
		if id, ok := s.cfg.Store.Get(k.key); !ok || id != c.ThreadID {
			return fmt.Errorf("chat %s: its thread changed since the sweep began", k.key)
		}
		if at, ok := s.lastTurn(k.key); !ok || time.Since(at) < idleAfter {
			return fmt.Errorf("chat %s: no longer idle", k.key)
		}
		retire()
		reason := fmt.Sprintf("idle since %s (archive after %s)", c.Since.UTC().Format(time.RFC3339), idleAfter)
		err := s.cfg.Retention.Archive(ctx, codex, k.key, c.ThreadID, reason)
		if err == nil && s.cfg.ForgetSettings != nil {
			err = s.cfg.ForgetSettings(k.key) // the chat's model and effort end with it
		}
		return err
	})
}

// comeBack resumes the archived thread of chatKey, a chat with no live thread, after
// unarchiving it: ok is true when the conversation continues. A thread that is gone (deleted
// for good, or removed by hand) leaves ok false and sess.goneThread set: the chat starts a new
// thread and is told so once.
func (s *archiver) comeBack(ctx context.Context, chatKey string, sess *session) (threadID string, ok bool, err error) {
	l := s.cfg.Retention
	if l == nil {
		return "", false, nil
	}
	e, found := l.Lookup(chatKey)
	if !found {
		return "", false, nil
	}
	if a, can := sess.child.(retention.Codex); can {
		// Fails harmlessly for a rollout a kill left in the live folder, or one deleted:
		// codex answers both with -32600, so the resume below decides.
		if uerr := a.UnarchiveThread(ctx, e.ThreadID); uerr != nil {
			sess.log.Info("unarchive failed; resuming anyway", zap.String("thread_id", e.ThreadID), zap.Error(uerr))
		}
	}
	err = sess.child.ResumeThread(ctx, e.ThreadID, s.cfg.Thread)
	switch {
	case err == nil:
		if serr := s.cfg.Store.Set(chatKey, e.ThreadID); serr != nil {
			return "", false, fmt.Errorf("chat %s: record unarchived thread %s: %w", chatKey, e.ThreadID, serr)
		}
		if rerr := l.Unarchived(chatKey, e.ThreadID); rerr != nil {
			sess.log.Error("could not record the unarchived thread", zap.Error(rerr))
		}
		sess.recorded = true
		sess.log.Info("archived chat came back; its thread is unarchived and resumed", zap.String("thread_id", e.ThreadID))
		return e.ThreadID, true, nil
	case errors.Is(err, appserver.ErrThreadNotFound):
		sess.goneThread = e.ThreadID
		sess.log.Warn("archived chat came back but its thread is gone; starting a new thread",
			zap.String("thread_id", e.ThreadID), zap.String("state", e.Event), zap.Error(err))
		return "", false, nil
	default:
		return "", false, err
	}
}

// goneNotice is the line a chat whose archived thread was deleted reads once.
func goneNotice(threadID string) string {
	return fmt.Sprintf("the earlier conversation was archived after a long idle time and has since been deleted (thread %s); this is a new conversation", threadID)
}

// retentionLoop runs ArchiveSweep with Config.RetentionPolicy every RetentionEvery, first at
// start, until Shutdown.
func (s *archiver) retentionLoop(accepting context.Context) {
	every := s.cfg.RetentionEvery
	if every <= 0 {
		every = DefaultRetentionEvery
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-accepting.Done():
			return
		case <-t.C:
		}
		res, err := s.sweep(accepting, s.cfg.RetentionPolicy, false)
		if err != nil && accepting.Err() == nil {
			s.log.Warn("retention sweep failed; trying again at the next", zap.Error(err))
		} else if len(res.Archived)+len(res.Deleted)+len(res.Busy)+len(res.Errors)+res.Uploads.Files > 0 {
			s.log.Info("retention sweep", zap.Int("archived", len(res.Archived)), zap.Int("deleted", len(res.Deleted)),
				zap.Int("busy", len(res.Busy)), zap.Int("errors", len(res.Errors)), zap.Int("uploads_removed", res.Uploads.Files))
		}
		t.Reset(every)
	}
}

// RetentionCounts returns what the archive log did since start (zero without one).
func (s *Supervisor) RetentionCounts() retention.Counts {
	if s.cfg.Retention == nil {
		return retention.Counts{}
	}
	return s.cfg.Retention.Counts()
}
