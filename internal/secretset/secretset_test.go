package secretset

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestRedactEverySource(t *testing.T) {
	s := New()
	s.Add(PlatformLogin, "access-L1-aaaaaaaa", "refresh-L1-bbbbbbbb")
	s.Add(WorkspaceSecrets, "db-password-cccccc")
	s.Add(InboundSecret, "inbound-dddddddd")
	s.Add(WorkspaceToken, "ws-token-eeeeeeee")
	s.Add(Environment, "sk-proj-ffffffff")
	s.Add(Listeners, "inbox-token-gggg")
	text := "a access-L1-aaaaaaaa b refresh-L1-bbbbbbbb c db-password-cccccc d inbound-dddddddd e ws-token-eeeeeeee f sk-proj-ffffffff g inbox-token-gggg h"
	want := "a [REDACTED] b [REDACTED] c [REDACTED] d [REDACTED] e [REDACTED] f [REDACTED] g [REDACTED] h"
	if got := s.Redact(text); got != want {
		t.Fatalf("Redact = %q\nwant     %q", got, want)
	}
	if got := s.RedactKnown(text); got != want {
		t.Fatalf("RedactKnown = %q", got)
	}
	if got := len(s.Values()); got != 7 {
		t.Fatalf("%d values, want 7", got)
	}
}

func TestShortValuesIgnored(t *testing.T) {
	s := New()
	s.Add(WorkspaceSecrets, "true", "8080", "  ", "", "1234567")
	if n := s.Len(); n != 0 {
		t.Fatalf("%d short values kept", n)
	}
	if got := s.Redact("true on 8080"); got != "true on 8080" {
		t.Fatalf("a short value was redacted: %q", got)
	}
}

// The longer of two secrets that overlap goes whole: an access token that starts with another
// value must not leave its tail behind.
func TestLongestFirst(t *testing.T) {
	s := New()
	s.Add(WorkspaceToken, "prefix-12345")
	s.Add(PlatformLogin, "prefix-12345-and-more-67890")
	if got := s.Redact("x prefix-12345-and-more-67890 y prefix-12345 z"); got != "x [REDACTED] y [REDACTED] z" {
		t.Fatalf("got %q", got)
	}
}

// Each source keeps its newest PerSource generations: a source that rotates often drops its own
// oldest, never another source's. One Add is one generation, however many values it holds.
func TestBoundPerSource(t *testing.T) {
	s := New()
	s.Add(InboundSecret, "inbound-stays-0000")
	for i := range PerSource + 5 {
		s.Add(WorkspaceToken, fmt.Sprintf("token-generation-%03d", i))
	}
	got := s.Sources()
	if got[WorkspaceToken] != PerSource || got[InboundSecret] != 1 {
		t.Fatalf("sizes %v, want %d tokens and 1 inbound secret", got, PerSource)
	}
	if r := s.Redact("token-generation-004"); r != "token-generation-004" {
		t.Fatalf("the 5th oldest generation is still held: %q", r)
	}
	if r := s.Redact("token-generation-005 token-generation-036 inbound-stays-0000"); r != "[REDACTED] [REDACTED] [REDACTED]" {
		t.Fatalf("got %q", r)
	}
	s.Add(WorkspaceSecrets, manyValues(3*PerSource)...)
	if r := s.Redact(manyValues(3 * PerSource)[0]); r != Redacted {
		t.Fatalf("one generation of %d values lost some: %q", 3*PerSource, r)
	}
	// A generation added again is the newest: it outlives the ones added after it once.
	s.Add(WorkspaceToken, "token-generation-005")
	s.Add(WorkspaceToken, "token-generation-new")
	if r := s.Redact("token-generation-005 token-generation-006"); r != "[REDACTED] token-generation-006" {
		t.Fatalf("after a re-add: %q", r)
	}
}

// A reader is read at every Values and Redact, and what it returned once stays known after it
// moved on (RedactKnown, which never reads, knows it too).
func TestReaderReadAtEveryUse(t *testing.T) {
	s := New()
	var cur atomic.Value
	cur.Store("auth-access-one-1111")
	reads := 0
	s.AddReader(AuthFile, func() []string { reads++; return []string{cur.Load().(string)} })
	if got := s.Redact("auth-access-one-1111"); got != Redacted {
		t.Fatalf("got %q", got)
	}
	cur.Store("auth-access-two-2222")
	if !slices.Contains(s.Values(), "auth-access-two-2222") {
		t.Fatal("the reader's new value is not listed")
	}
	if got := s.RedactKnown("auth-access-one-1111 auth-access-two-2222"); got != Redacted+" "+Redacted {
		t.Fatalf("RedactKnown = %q", got)
	}
	if reads != 2 {
		t.Fatalf("%d reads, want 2 (one per Redact/Values, none per RedactKnown)", reads)
	}
}

// A secret with characters JSON escapes is caught inside an encoded document as well as raw.
func TestRedactJSON(t *testing.T) {
	s := New()
	s.Add(WorkspaceSecrets, `p&ss<w>"rd\0123`, "plain-secret-99")
	doc, err := json.Marshal(map[string]string{"text": `say p&ss<w>"rd\0123 and plain-secret-99`})
	if err != nil {
		t.Fatal(err)
	}
	got := string(s.RedactJSON(doc))
	if strings.Contains(got, "ss") || strings.Contains(got, "plain-secret") {
		t.Fatalf("RedactJSON = %s", got)
	}
	var back map[string]string
	if err := json.Unmarshal([]byte(got), &back); err != nil || back["text"] != "say [REDACTED] and [REDACTED]" {
		t.Fatalf("not valid JSON with the secrets redacted: %s (%v)", got, err)
	}
}

// The set crosses a reload: what one image held, the next holds, each source in its order.
func TestExportImport(t *testing.T) {
	a := New()
	a.Add(PlatformLogin, "old-access-token-1", "new-access-token-2")
	a.Add(WorkspaceToken, "workspace-token-3")
	a.AddReader(AuthFile, func() []string { return []string{"auth-file-token-4"} })
	doc, err := json.Marshal(a.Export())
	if err != nil {
		t.Fatal(err)
	}
	var m map[Source][][]string
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	b := New()
	b.Import(m)
	if got := b.Redact("old-access-token-1 new-access-token-2 workspace-token-3 auth-file-token-4"); strings.Count(got, Redacted) != 4 {
		t.Fatalf("after import: %q", got)
	}
	if got := m[PlatformLogin]; len(got) != 1 || !slices.Equal(got[0], []string{"new-access-token-2", "old-access-token-1"}) {
		t.Fatalf("export %v", got)
	}
}

func TestNilSetHoldsNothing(t *testing.T) {
	var s *Set
	s.Add(WorkspaceToken, "whatever-token")
	if s.Redact("whatever-token") != "whatever-token" || s.Values() != nil || s.Len() != 0 || s.Export() != nil {
		t.Fatal("a nil set acted")
	}
	if l := zap.NewNop(); s.Logger(l) != l {
		t.Fatal("a nil set wrapped the logger")
	}
}

func TestLoggerRedacts(t *testing.T) {
	s := New()
	core, logs := observer.New(zap.DebugLevel)
	log := s.Logger(zap.New(core))
	s.Add(WorkspaceToken, "learned-after-the-logger")
	log.With(zap.String("with", "x learned-after-the-logger")).Info("msg learned-after-the-logger",
		zap.Error(fmt.Errorf("err learned-after-the-logger")), zap.ByteString("b", []byte("learned-after-the-logger")),
		zap.Any("any", map[string]string{"k": "learned-after-the-logger"}))
	log.Info("nothing secret", zap.Strings("args", []string{"a", "b"}), zap.Error(fmt.Errorf("plain")))
	if logs.Len() != 2 {
		t.Fatalf("%d entries", logs.Len())
	}
	if plain := logs.All()[1].ContextMap(); fmt.Sprintf("%T", plain["args"]) != "[]interface {}" || plain["error"] != "plain" {
		t.Errorf("a field without a secret changed its shape: %#v", plain)
	}
	e := logs.All()[0]
	line := fmt.Sprint(e.Message, e.ContextMap())
	if strings.Contains(line, "learned-after") || strings.Count(line, Redacted) != 5 {
		t.Fatalf("log entry %s", line)
	}
}

func manyValues(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("workspace-secret-value-%03d", i)
	}
	return out
}
