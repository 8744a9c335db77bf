// Package idring is a bounded set of ids that forgets the oldest first. The Molecule inbox's
// ledger remembers finished activity ids in one, so a row the platform sends again (a restart, a
// cursor reset) is not answered twice; its feed remembers the poison rows it reported in another.
// Neither owns the other, so the set lives apart from both.
package idring

// Ring is a bounded set of ids that forgets the oldest first. It has no lock: its owner guards it.
type Ring struct {
	ids  []string
	next int // where the next id goes once the ring is full
	set  map[string]struct{}
}

// New returns an empty ring that remembers up to capacity ids; with capacity 0 it remembers none.
func New(capacity int) *Ring {
	return &Ring{ids: make([]string, 0, capacity), set: make(map[string]struct{}, capacity)}
}

// Has reports whether id is remembered.
func (r *Ring) Has(id string) bool {
	_, ok := r.set[id]
	return ok
}

// Add remembers id, forgetting the oldest id when the ring is full; an id already present keeps
// its age.
func (r *Ring) Add(id string) {
	if r.Has(id) || cap(r.ids) == 0 {
		return
	}
	r.set[id] = struct{}{}
	if len(r.ids) < cap(r.ids) {
		r.ids = append(r.ids, id)
		return
	}
	delete(r.set, r.ids[r.next])
	r.ids[r.next] = id
	r.next = (r.next + 1) % len(r.ids)
}

// List returns the ids oldest first, in a new slice.
func (r *Ring) List() []string {
	out := make([]string, 0, len(r.ids))
	out = append(out, r.ids[r.next:]...)
	return append(out, r.ids[:r.next]...)
}

// Cap is how many ids the ring remembers at most.
func (r *Ring) Cap() int { return cap(r.ids) }
