package molecule

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// deepRow is a row whose text parts are nested n levels deep: past encoding/json's limit (10,000)
// no decoder accepts it.
func deepRow(id string, n int) string {
	return `{"id":"` + id + `","activity_type":"a2a_receive","method":"message/send","request_body":{"params":{"message":{"parts":` +
		strings.Repeat("[", n) + strings.Repeat("]", n) + `}}}}`
}

// A page of hostile rows, each with a stated outcome, costs only the bad rows themselves: the
// good rows around them are answered, in order, exactly once, and the cursor moves past all.
//
//	row                                   stated outcome
//	parts nested 100,000 deep             poison, logged with its id (read from its first members); the page is still read
//	parts nested 5,000 deep (valid JSON)  poison: no text
//	10 MB text                            answered with the text capped at MaxTextBytes and a note
//	invalid UTF-8 in the text             answered; each bad byte becomes U+FFFD
//	the same id twice in one page         answered once
//	unknown activity type                 poison
func TestHostileRows(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, logs := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.MaxTextBytes = 64 << 10
	r := start(t, cfg)

	canvas := func(id, text string) string {
		b, err := json.Marshal(text)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf(`{"id":%q,"activity_type":"a2a_receive","method":"message/send","request_body":{"params":{"message":{"parts":[{"kind":"text","text":%s}]}}}}`, id, b)
	}
	p.EnqueueRaw(
		canvas("h-first", "first"),
		deepRow("h-deep", 100_000),
		deepRow("h-deep5k", 5_000),
		canvas("h-huge", strings.Repeat("x", 10<<20)),
		`{"id":"h-utf8","activity_type":"a2a_receive","method":"message/send","summary":"bad `+"\xff\xfe"+` bytes"}`,
		canvas("h-dup", "once"),
		canvas("h-dup", "once"),
		`{"id":"h-kind","activity_type":"task_update","summary":"x"}`,
		canvas("h-last", "last"),
	)
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.Cursor == "h-last" && s.Delivered == 5 })))

	var texts []string
	for _, c := range a.Calls() {
		texts = append(texts, c.Text)
	}
	if len(texts) != 5 || texts[0] != "first" || texts[4] != "last" || texts[3] != "once" {
		t.Fatalf("Submit texts (in order) = %.80q, want first, huge, utf8, once, last", texts)
	}
	if huge := texts[1]; len(huge) > cfg.MaxTextBytes || !strings.Contains(huge, "[message truncated: ") {
		t.Errorf("10 MB text reached codex as %d bytes without the truncation note", len(huge))
	}
	if u := texts[2]; !utf8.ValidString(u) || u != "bad \uFFFD\uFFFD bytes" {
		t.Errorf("invalid UTF-8 text reached codex as %q, want each bad byte replaced", u)
	}
	s := r.m.Stats()
	if s.Poison != 3 || s.Duplicates != 1 || s.PollErrors != 0 {
		t.Errorf("poison %d duplicates %d poll errors %d, want 3, 1, 0 (%+v)", s.Poison, s.Duplicates, s.PollErrors, s)
	}
	logged := map[string]bool{}
	for _, e := range logs.FilterMessageSnippet("poison row").All() {
		if id, ok := e.ContextMap()["activity_id"].(string); ok {
			logged[id] = true
		}
	}
	for _, id := range []string{"h-deep", "h-deep5k", "h-kind"} {
		if !logged[id] {
			t.Errorf("poison row %s not logged with its id (logged: %v)", id, logged)
		}
	}
}

// A row larger than the whole poll cap, its id written after the large value, in a page read
// with a cursor: it is skipped without being held, judged poison by its id, and the rows after it
// are answered. Without that, polling would fetch the same cut page forever.
func TestRowLargerThanPollCap(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, logs := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.MaxPollBytes = 1 << 20
	r := start(t, cfg)

	p.Enqueue(moleculetest.CanvasMessage("before"))
	must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.Delivered == 1 })))
	p.EnqueueStream("h-big", moleculetest.LargeRow("h-big", 3<<20, true))
	p.Enqueue(moleculetest.CanvasMessage("after"))
	must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.Delivered == 2 })))

	if calls := a.Calls(); len(calls) != 2 || calls[1].Text != "after" {
		t.Fatalf("Submit calls = %.60q, want before, after", calls)
	}
	if s := r.m.Stats(); s.Poison != 1 {
		t.Errorf("poison = %d, want 1 (%+v)", s.Poison, s)
	}
	if n := poisonLogged(logs)["h-big"]; n != 1 {
		t.Errorf("the oversized row was logged as poison with its id %d times, want 1", n)
	}
}

// poisonLogged counts the poison warnings per activity id.
func poisonLogged(logs *observer.ObservedLogs) map[string]int {
	n := map[string]int{}
	for _, e := range logs.FilterMessageSnippet("poison row").All() {
		id, _ := e.ContextMap()["activity_id"].(string)
		n[id]++
	}
	return n
}

// The first poll has no cursor: the platform answers the last 600 s newest first. A window that
// holds more bytes than a poll keeps (here 22 rows, 20 of them large, against a 64 KiB budget)
// loses nothing: every row is answered once, oldest first.
func TestNewestFirstWindowLosesNothing(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	var rows []moleculetest.Row
	var want []string
	for i := range 22 {
		text := fmt.Sprintf("m%02d", i)
		if i != 5 && i != 15 {
			text += " " + strings.Repeat("x", 12<<10)
		}
		want = append(want, text)
		rows = append(rows, moleculetest.CanvasMessage(text))
	}
	ids := p.Enqueue(rows...)
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.MaxPollBytes = 64 << 10
	r := start(t, cfg)

	must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.Cursor == ids[21] })))
	var got []string
	for _, c := range a.Calls() {
		got = append(got, c.Text)
	}
	if !slices.Equal(got, want) {
		short := func(s []string) []string {
			out := make([]string, len(s))
			for i, t := range s {
				out[i] = t[:3]
			}
			return out
		}
		t.Fatalf("answered %v, want every row oldest first %v", short(got), short(want))
	}
	if s := r.m.Stats(); s.Poison != 0 || s.PollErrors != 0 || s.Delivered != 22 {
		t.Errorf("stats = %+v", s)
	}
	if first := p.CallsTo(moleculetest.RouteActivity)[0]; !first.Query.Has("since_secs") {
		t.Fatalf("first poll %v has a cursor; the test needs a newest-first window", first.Query)
	}
}

// A 100 MB row whose id comes after its large value, in a newest-first window of three: it is
// streamed past without being held, judged poison once by its id, and the two rows beside it are
// answered oldest first.
func TestHugeRowIDLastInWindow(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	p.Enqueue(moleculetest.CanvasMessage("before"))
	p.EnqueueStream("h-huge", moleculetest.LargeRow("h-huge", 100<<20, true))
	last := p.Enqueue(moleculetest.CanvasMessage("after"))[0]
	a := chattest.NewAnswerer(nil)
	log, logs := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.RequestTimeout = waitTimeout // the body takes a while under -race
	r := start(t, cfg)

	// The durable cursor is a low-water mark: at the last row, every row before it is finished.
	must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.Cursor == last })))
	var got []string
	for _, c := range a.Calls() {
		got = append(got, c.Text)
	}
	if !slices.Equal(got, []string{"before", "after"}) {
		t.Fatalf("answered %q, want before, after", got)
	}
	if s := r.m.Stats(); s.Poison != 1 {
		t.Errorf("poison = %d, want 1 (%+v)", s.Poison, s)
	}
	if n := poisonLogged(logs)["h-huge"]; n != 1 {
		t.Errorf("the huge row was logged as poison with its id %d times, want 1", n)
	}
}

// A poison row without an id cannot be moved past with since_id until a later row comes: every
// poll fetches it again. It is warned about and counted once, not on every poll.
func TestPoisonWithoutIDWarnedOnce(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, logs := newTestLogger(t)
	r := start(t, testConfig(p, t.TempDir(), a, log))
	p.Enqueue(moleculetest.CanvasMessage("first"))
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.Delivered == 1 })))

	p.EnqueueRaw(`{"activity_type":"a2a_receive","method":"message/send","summary":"no id"}`)
	polls := p.CountCalls(moleculetest.RouteActivity, 200)
	must(t, p.WaitFor(ctx, func() bool { return p.CountCalls(moleculetest.RouteActivity, 200) >= polls+10 }))
	if n := poisonLogged(logs)[""]; n != 1 {
		t.Errorf("the id-less poison row was warned about %d times in 10 polls, want 1", n)
	}
	if s := r.m.Stats(); s.Poison != 1 {
		t.Errorf("poison = %d, want 1", s.Poison)
	}
	next := p.Enqueue(moleculetest.CanvasMessage("next"))[0]
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.Cursor == next })))
}

// A state file that cannot be written (a full disk; here a directory stands where the file goes,
// since tests run as root and permissions would not stop them) is logged and counted, and loses
// nothing: messages are still answered and delivered, the position is kept in memory, and the
// first write that succeeds again records everything.
func TestStateWriteFailureLosesNothing(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, logs := newTestLogger(t)
	dir := t.TempDir()
	r := start(t, testConfig(p, dir, a, log))
	path := filepath.Join(dir, StateFileName)
	must(t, os.RemoveAll(path))
	must(t, os.MkdirAll(filepath.Join(path, "blocker"), 0o700))

	first := p.Enqueue(moleculetest.CanvasMessage("while the disk is full"))[0]
	// The first failed write is counted before it is logged, so wait for the line, with the
	// message finished and its position in memory, rather than look for it as soon as the
	// counters move.
	stateWriteLogged := func() bool { return logs.FilterMessageSnippet("could not write the state file").Len() > 0 }
	if err := p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool {
		return s.Delivered == 1 && s.Cursor == first && s.PersistErrors > 0 && stateWriteLogged()
	})); err != nil {
		t.Fatalf("%v: stats %+v; the failed state write logged: %v", err, r.m.Stats(), stateWriteLogged())
	}

	must(t, os.RemoveAll(path))
	second := p.Enqueue(moleculetest.CanvasMessage("after space came back"))[0]
	must(t, p.WaitFor(waitCtx(t), statsCond(r.m, func(s Stats) bool { return s.Delivered == 2 && s.Cursor == second })))
	must(t, r.stop())
	b, err := os.ReadFile(path)
	must(t, err)
	var st struct {
		Cursor string `json:"cursor"`
	}
	must(t, json.Unmarshal(b, &st))
	if st.Cursor != second {
		t.Errorf("state file cursor = %q after space came back, want %q", st.Cursor, second)
	}
	if calls := a.Calls(); len(calls) != 2 {
		t.Errorf("%d Submit calls, want 2 (no message answered twice or lost)", len(calls))
	}
}
