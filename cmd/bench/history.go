package main

import (
	"context"
	"fmt"
	"strconv"
)

// historyThread is one side's thread in the history comparison and how many turns it holds.
type historyThread struct {
	side  side
	id    string
	turns int
}

// extend brings the thread to want turns with a bare warm client (start or resume, turns,
// close): the cheap way to build history before measuring.
func (b *bench) extend(ctx context.Context, t *historyThread, want int) error {
	if t.turns >= want && t.id != "" {
		return nil
	}
	w, err := startWarm(ctx, warmConfig{Bin: b.cfg.CodexBin, Side: t.side}, t.id)
	if err != nil {
		return err
	}
	t.id = w.threadID
	for t.turns < want {
		if _, err := w.send(ctx, fmt.Sprintf("history turn %d", t.turns+1)); err != nil {
			return joinClose(err, w.close())
		}
		t.turns++
		if err := checkHistory(w.lastReply, t.turns); err != nil {
			return joinClose(err, w.close())
		}
	}
	return w.close()
}

// runHistory is comparison 4: the per-message cost as the thread's history grows. For each level
// L, each side's thread is first brought to L turns with a warm client that is then closed. Then
// HistorySamples messages alternate between `codex exec resume` on the exec side's thread and a
// fresh warm client that resumed the warm side's thread (the resume is not timed: a warm daemon
// pays it once per child, not per message). Every sample adds a turn on both sides alike, so
// sample i of either side sees L+i earlier turns.
func (b *bench) runHistory(ctx context.Context) error {
	const name = labelHistory
	mock, err := b.newMock(0)
	if err != nil {
		return err
	}
	defer mock.Close()
	execSide, err := b.ws.newSide("history-exec", mock)
	if err != nil {
		return err
	}
	warmSide, err := b.ws.newSide("history-warm", mock)
	if err != nil {
		return err
	}
	samples := b.cfg.HistorySamples
	execT := &historyThread{side: execSide}
	warmT := &historyThread{side: warmSide}
	for _, level := range b.cfg.HistoryLevels {
		if execT.turns > level {
			// The samples of the previous level already went past this one; both sides still
			// hold the same number of turns, which the row reports.
			b.logf("history: level %d is below the %d turns the threads already hold", level, execT.turns)
		}
		b.logf("history: building %d earlier turns on both threads", level)
		if err := b.extend(ctx, execT, level); err != nil {
			return fmt.Errorf("history %d: %w", level, err)
		}
		if err := b.extend(ctx, warmT, level); err != nil {
			return fmt.Errorf("history %d: %w", level, err)
		}
		got := execT.turns
		b.logf("history: %d samples per side at %d earlier turns (alternating)", samples, got)
		execMS, warmMS, err := b.historySamples(ctx, execT, warmT, samples)
		if err != nil {
			return fmt.Errorf("history %d: %w", level, err)
		}
		e, w := median(execMS), median(warmMS)
		b.addRow(name, fmt.Sprintf("wall ms/msg at %d earlier turns, median of %d", got, samples),
			"exec-resume", e, "warm", w, "exec/warm", ratio(e, w))
		b.sum.set("history_"+strconv.Itoa(level)+"_ratio", ratio(e, w))
		b.sum.set("history_"+strconv.Itoa(level)+"_exec_ms", e)
		b.sum.set("history_"+strconv.Itoa(level)+"_warm_ms", w)
	}
	return nil
}

// historySamples measures samples messages per side, alternating, and advances both threads'
// turn counts.
func (b *bench) historySamples(ctx context.Context, execT, warmT *historyThread, samples int) (execMS, warmMS []float64, err error) {
	warm, err := startWarm(ctx, warmConfig{Bin: b.cfg.CodexBin, Side: warmT.side}, warmT.id)
	if err != nil {
		return nil, nil, err
	}
	ex := &execChat{bin: b.cfg.CodexBin, side: execT.side, threadID: execT.id}
	level := execT.turns
	err = alternate(samples, func(i int) error {
		s, err := ex.send(ctx, fmt.Sprintf("history sample %d after %d", i+1, level))
		if err != nil {
			return err
		}
		execT.turns++
		if err := checkHistory(ex.lastReply, execT.turns); err != nil {
			return fmt.Errorf("exec resume: %w", err)
		}
		execMS = append(execMS, ms(s.Wall))
		return nil
	}, func(i int) error {
		wall, err := warm.send(ctx, fmt.Sprintf("history sample %d after %d", i+1, level))
		if err != nil {
			return err
		}
		warmT.turns++
		if err := checkHistory(warm.lastReply, warmT.turns); err != nil {
			return fmt.Errorf("warm: %w", err)
		}
		warmMS = append(warmMS, ms(wall))
		return nil
	})
	if closeErr := warm.close(); err == nil {
		err = closeErr
	}
	return execMS, warmMS, err
}
