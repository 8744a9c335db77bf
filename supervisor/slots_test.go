package supervisor

import "testing"

// TestLRUIdle: the victim is the idle child used longest ago whose key has nothing queued.
func TestLRUIdle(t *testing.T) {
	t.Parallel()
	queued := map[string]int{}
	mk := func(key string, state State, useSeq uint64, n int) *session {
		queued[key] = n
		return &session{key: &keyState{key: key}, state: state, useSeq: useSeq}
	}
	busyOld := mk("busy", StateBusy, 1, 0)
	backlogged := mk("backlogged", StateIdle, 2, 1)
	want := mk("want", StateIdle, 3, 0)
	newer := mk("newer", StateIdle, 4, 0)
	retiring := mk("retiring", StateRetiring, 0, 0)
	count := func(key string) int { return queued[key] }
	sessions := map[*session]struct{}{busyOld: {}, backlogged: {}, want: {}, newer: {}, retiring: {}}
	if got := lruIdle(sessions, count); got != want {
		t.Fatalf("lruIdle picked useSeq %d state %s, want the idle useSeq 3", got.useSeq, got.state)
	}
	delete(sessions, want)
	delete(sessions, newer)
	if got := lruIdle(sessions, count); got != nil {
		t.Fatalf("lruIdle picked useSeq %d with no eligible child, want nil", got.useSeq)
	}
}
