package idring

import (
	"slices"
	"testing"
)

// The ring forgets the oldest id first, keeps an id's age when it is added again, and lists
// oldest first across the wrap.
func TestRingForgetsOldestFirst(t *testing.T) {
	t.Parallel()
	r := New(3)
	for _, id := range []string{"a", "b", "c", "a", "d"} {
		r.Add(id)
	}
	if got := r.List(); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Fatalf("List = %v, want b c d", got)
	}
	if r.Has("a") || !r.Has("b") || !r.Has("d") {
		t.Fatalf("Has: a %v b %v d %v, want a forgotten", r.Has("a"), r.Has("b"), r.Has("d"))
	}
	if r.Cap() != 3 {
		t.Fatalf("Cap = %d", r.Cap())
	}
}

// A ring of capacity 0 remembers nothing.
func TestRingZeroCapacity(t *testing.T) {
	t.Parallel()
	r := New(0)
	r.Add("a")
	if r.Has("a") || len(r.List()) != 0 {
		t.Fatal("a ring of capacity 0 remembered an id")
	}
}
