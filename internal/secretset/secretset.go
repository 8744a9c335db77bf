// Package secretset is the one set of secrets the daemon holds: whatever learns a secret adds it,
// and every path by which text or files leave the daemon reads it. The send_file scan refuses a
// file holding any of them (package chatfiles); the inboxes' redactors replace them in every
// reply, note, progress line, current_task and log entry they write.
//
// One set, fed from every source, because a secret missed by one path leaks through it: the
// org's ChatGPT login the platform rotated was known to the login manager but not to the scan,
// and a model could send it in a file or simply print it in its answer.
//
// The set is bounded: the last PerSource generations of each source are kept for the daemon's
// life (and across a reload, see Export), older ones are dropped. A generation is what one Add
// learned at once: one workspace token, one login's access, refresh and id tokens, one answer of
// the workspace's secrets. A rotated refresh token is spent and an access token expires, but an
// access token stays valid for a while after the refresh token that minted it rotated, so the
// last generations are kept, not only the current one.
package secretset

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Source names where a secret was learned. Each source keeps its own last PerSource
// generations, so a source that rotates often cannot push another's out.
type Source string

// The sources the daemon feeds (docs/security.md lists them).
const (
	// PlatformLogin: the tokens of every generation of the ChatGPT login the platform owns, as
	// read from CODEX_AUTH_JSON / CODEX_CHATGPT_AUTH_JSON in the environment, from the
	// workspace's secrets and from the auth.json the platform syncs.
	PlatformLogin Source = "platform_login"
	// WorkspaceSecrets: every value GET /workspaces/{ws}/secrets/values answered (all of a
	// workspace's secrets are secret, not only the login).
	WorkspaceSecrets Source = "workspace_secrets"
	// InboundSecret: platform_inbound_secret from the register and heartbeat answers.
	InboundSecret Source = "platform_inbound_secret"
	// WorkspaceToken: the workspace token the daemon started with and every one it took into use
	// since (rotations, a token register issued).
	WorkspaceToken Source = "workspace_token"
	// AuthFile: CODEX_HOME/auth.json's tokens and API key, read again at every use of the set
	// (AddReader), so a refreshed token is known at once.
	AuthFile Source = "auth_json"
	// Environment: OPENAI_API_KEY and CODEX_API_KEY in the daemon's environment.
	Environment Source = "environment"
	// Listeners: the local inbox's and the metrics listener's bearer tokens.
	Listeners Source = "listener_tokens"
)

// PerSource is how many generations of one source are kept: the newest, for the daemon's life.
const PerSource = 32

// MinLen is the shortest value taken. Every real secret here (tokens, keys) is far longer; a
// shorter "secret" (a workspace secret such as "true" or a port) would refuse every file and
// blank every reply that happens to contain it.
const MinLen = 8

// Redacted replaces a secret in text.
const Redacted = "[REDACTED]"

// Set is the daemon's secrets. The zero value is not usable; New makes one. A nil *Set holds
// nothing: its methods redact nothing and list nothing, so a component built without one (a
// test, a tool) needs no special case.
type Set struct {
	mu      sync.Mutex
	rings   map[Source][][]string // generations, oldest first, at most PerSource each
	readers []reader
	version uint64
	// cached is the replacers built for version (nil until needed or after a change).
	cached *replacers
}

// reader is a source read again at every use.
type reader struct {
	src  Source
	read func() []string
}

// replacers redact text and JSON for one version of the set.
type replacers struct {
	version uint64
	text    *strings.Replacer
	json    *strings.Replacer
	values  []string
}

// New returns an empty set.
func New() *Set {
	return &Set{rings: make(map[Source][][]string)}
}

// Add takes one generation of src: the values learned from it at once. The same generation
// learned again moves to the newest place of src; the oldest beyond PerSource are dropped. Values
// shorter than MinLen are ignored.
func (s *Set) Add(src Source, values ...string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addLocked(src, values)
}

func (s *Set) addLocked(src Source, values []string) {
	var gen []string
	for _, v := range values {
		if v = strings.TrimSpace(v); len(v) >= MinLen && !slices.Contains(gen, v) {
			gen = append(gen, v)
		}
	}
	if len(gen) == 0 {
		return
	}
	slices.Sort(gen)
	ring := s.rings[src]
	if i := slices.IndexFunc(ring, func(g []string) bool { return slices.Equal(g, gen) }); i >= 0 {
		// Known already: what is redacted does not change, only which generation goes last.
		s.rings[src] = append(slices.Delete(ring, i, i+1), gen)
		return
	}
	ring = append(ring, gen)
	if len(ring) > PerSource {
		ring = slices.Delete(ring, 0, len(ring)-PerSource)
	}
	s.rings[src] = ring
	s.version++
	s.cached = nil
}

// AddReader makes read a source of src that is read again at every use of the set (Values,
// Redact): a file another process rewrites (auth.json) is known as it is now. What it returns is
// also kept like an Add, so a value seen once is still redacted after the file moved on, and
// RedactKnown (which never reads) knows it too.
func (s *Set) AddReader(src Source, read func() []string) {
	if s == nil || read == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readers = append(s.readers, reader{src: src, read: read})
}

// readAll runs the readers (outside the lock: they do I/O) and keeps what they found.
func (s *Set) readAll() {
	s.mu.Lock()
	rs := slices.Clone(s.readers)
	s.mu.Unlock()
	for _, r := range rs {
		if v := r.read(); len(v) > 0 {
			s.Add(r.src, v...)
		}
	}
}

// Values returns every secret held, the readers read now, longest first.
func (s *Set) Values() []string {
	if s == nil {
		return nil
	}
	s.readAll()
	return slices.Clone(s.current().values)
}

// Secrets is Values; it makes a *Set the chatfiles.Secrets the send_file scan asks at every file.
func (s *Set) Secrets() []string { return s.Values() }

// Redact returns text with every secret held replaced by Redacted, the readers read now.
func (s *Set) Redact(text string) string {
	if s == nil || text == "" {
		return text
	}
	s.readAll()
	return s.current().text.Replace(text)
}

// RedactKnown is Redact without reading the readers: for log entries, which are many, where a
// file read each would cost more than the entry. Every value a reader ever returned is known.
func (s *Set) RedactKnown(text string) string {
	if s == nil || text == "" {
		return text
	}
	return s.current().text.Replace(text)
}

// RedactJSON redacts an encoded JSON document: each secret as it is and as a JSON string
// encodes it (encoding/json escapes <, > and & besides quotes and backslashes), so a secret with
// such characters is caught inside a string too. The readers are read now.
func (s *Set) RedactJSON(doc []byte) []byte {
	if s == nil || len(doc) == 0 {
		return doc
	}
	s.readAll()
	r := s.current()
	if len(r.values) == 0 {
		return doc
	}
	return []byte(r.json.Replace(string(doc)))
}

// Len is the number of values held (readers not read).
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.current().values)
}

// current returns the replacers of the set as it is, building them after a change.
func (s *Set) current() *replacers {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cached != nil && s.cached.version == s.version {
		return s.cached
	}
	seen := make(map[string]bool)
	var values []string
	for _, ring := range s.rings {
		for _, gen := range ring {
			for _, v := range gen {
				if !seen[v] {
					seen[v] = true
					values = append(values, v)
				}
			}
		}
	}
	// Longest first: where one secret is part of another, the whole of the longer one goes (a
	// replacer tries its pairs in order at each position).
	slices.SortFunc(values, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b))
	})
	text := make([]string, 0, 2*len(values))
	js := make([]string, 0, 4*len(values))
	for _, v := range values {
		text = append(text, v, Redacted)
		js = append(js, v, Redacted)
		if e := jsonEscaped(v); e != v {
			js = append(js, e, Redacted)
		}
	}
	s.cached = &replacers{version: s.version, values: values,
		text: strings.NewReplacer(text...), json: strings.NewReplacer(js...)}
	return s.cached
}

// jsonEscaped is v as it appears inside a JSON string that encoding/json wrote.
func jsonEscaped(v string) string {
	b, err := json.Marshal(v)
	if err != nil || len(b) < 2 {
		return v
	}
	return string(b[1 : len(b)-1])
}

// Export returns the generations held by source, oldest first, for the reload's handoff: a new
// image must not forget an access token that is still valid.
func (s *Set) Export() map[Source][][]string {
	if s == nil {
		return nil
	}
	s.readAll()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[Source][][]string, len(s.rings))
	for src, ring := range s.rings {
		if len(ring) > 0 {
			out[src] = slices.Clone(ring)
		}
	}
	return out
}

// Import adds what Export returned (an older image's set), each source's generations in their
// order.
func (s *Set) Import(m map[Source][][]string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, src := range slices.Sorted(maps.Keys(m)) {
		for _, gen := range m[src] {
			s.addLocked(src, gen)
		}
	}
}

// Sources returns how many generations each source holds (readers not read).
func (s *Set) Sources() map[Source]int {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[Source]int, len(s.rings))
	for src, ring := range s.rings {
		out[src] = len(ring)
	}
	return out
}
