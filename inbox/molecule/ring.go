package molecule

// idRing is a bounded set of ids that forgets the oldest first. It remembers finished activity
// ids so a row the platform sends again (a restart, a cursor reset) is not answered twice.
type idRing struct {
	ids  []string
	next int // where the next id goes once the ring is full
	set  map[string]struct{}
}

func newIDRing(capacity int) *idRing {
	return &idRing{ids: make([]string, 0, capacity), set: make(map[string]struct{}, capacity)}
}

func (r *idRing) has(id string) bool {
	_, ok := r.set[id]
	return ok
}

// add remembers id; an id already present keeps its age.
func (r *idRing) add(id string) {
	if r.has(id) || cap(r.ids) == 0 {
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

// list returns the ids oldest first.
func (r *idRing) list() []string {
	out := make([]string, 0, len(r.ids))
	out = append(out, r.ids[r.next:]...)
	return append(out, r.ids[:r.next]...)
}
