package moleculetest

// AnnounceDelegation does what the platform does when a delegation this workspace started ends:
// it broadcasts the DELEGATION_COMPLETE or DELEGATION_FAILED event of the delegate_result row r
// now, and returns land, which writes r into the feed (and returns its id) when the test says.
// The platform broadcasts the event just before it writes the row (delegation.go:906 then 913),
// so a poll the event wakes may not find the row yet; Enqueue of such a row is the two at once.
func (p *Platform) AnnounceDelegation(r Row) (land func() string) {
	p.mu.Lock()
	p.delegationEventLocked(r)
	p.changedLocked()
	p.mu.Unlock()
	return func() string {
		p.mu.Lock()
		defer p.mu.Unlock()
		id := p.appendLocked(r)
		p.changedLocked()
		return id
	}
}
