package chatjob

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
)

// UndoResult says what Undo took back.
type UndoResult struct {
	// Messages are the user messages of the exchanges taken back, oldest first.
	Messages []string
	// Files are the files those turns changed: they stay changed.
	Files []string
}

// Undo takes back chatKey's last n exchanges (thread/revert before the nth-newest turn with a
// user message). It is refused while the chat has a turn running or messages waiting
// (ErrChatBusy), beyond the thread's start (*UndoRangeError) and across a compaction
// (ErrUndoCompacted).
func (j *Jobs) Undo(ctx context.Context, chatKey string, n int) (UndoResult, error) {
	run, err := j.runner()
	if err != nil {
		return UndoResult{}, err
	}
	if n < 1 || n > MaxUndo {
		return UndoResult{}, fmt.Errorf("chat %s: undo: %w", chatKey, &UndoRangeError{Asked: n, Exchanges: -1})
	}
	var res UndoResult
	busy, err := run(ctx, chatKey, false, func(s Session) error {
		var err error
		res, err = undo(ctx, chatKey, s, n)
		return err
	})
	if busy {
		return UndoResult{}, fmt.Errorf("chat %s: undo: %w", chatKey, ErrChatBusy)
	}
	return res, err
}

// undo takes back s's last n exchanges.
func undo(ctx context.Context, key string, s Session, n int) (UndoResult, error) {
	tl, ok := s.Child.(turnLister)
	if !ok {
		return UndoResult{}, fmt.Errorf("chat %s: codex pid %d cannot list a thread's turns", key, s.PID)
	}
	// Turns without a user message are rare (a compaction's, which ends the search): as many
	// turns again as exchanges asked for is plenty.
	turns, err := tl.ListTurns(ctx, s.ThreadID, 2*n+1)
	if err != nil {
		return UndoResult{}, fmt.Errorf("chat %s: undo: %w", key, err)
	}
	before, res, err := plan(turns, n)
	if err != nil {
		return UndoResult{}, fmt.Errorf("chat %s: undo %d: %w", key, n, err)
	}
	if err := s.Child.RevertThread(ctx, s.ThreadID, before); err != nil {
		return UndoResult{}, fmt.Errorf("chat %s: undo: %w", key, err)
	}
	s.Log.Info("exchanges taken back from the chat", zap.Int("exchanges", n), zap.String("before_turn", before))
	return res, nil
}

// plan finds, in turns (newest first), the turn to revert before for taking back n exchanges,
// and what they held.
func plan(turns []appserver.HistoryTurn, n int) (before string, res UndoResult, err error) {
	seen, exchanges := map[string]bool{}, 0
	for _, t := range turns {
		if t.Compaction {
			return "", UndoResult{}, ErrUndoCompacted
		}
		if len(t.UserTexts) == 0 {
			continue
		}
		exchanges++
		res.Messages = append(append([]string(nil), t.UserTexts...), res.Messages...)
		for _, f := range t.Files {
			if !seen[f] {
				seen[f] = true
				res.Files = append(res.Files, f)
			}
		}
		if exchanges == n {
			return t.ID, res, nil
		}
	}
	return "", UndoResult{}, &UndoRangeError{Asked: n, Exchanges: exchanges}
}
