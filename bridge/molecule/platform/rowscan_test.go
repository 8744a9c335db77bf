package platform

import (
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// scanAll reads every element of in; it returns the rows read before an error, and the error.
func scanAll(in io.Reader, maxRow int) ([]Row, error) {
	sc := newRowScanner(in, maxRow)
	var rows []Row
	for {
		row, ok, err := sc.next()
		if err != nil || !ok {
			return rows, err
		}
		rows = append(rows, row)
	}
}

// oneByte reads one byte at a time, so every state of the scanner meets a buffer boundary.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(1, len(p))]) }

func TestRowScanner(t *testing.T) {
	t.Parallel()
	type want struct {
		raw  string // "" with over: oversized
		id   string
		over bool
	}
	long := strings.Repeat("y", 100)
	tests := []struct {
		name    string
		in      string
		maxRow  int
		rows    []want
		wantErr error // nil, errNotArray, or errAny
	}{
		{name: "empty", in: ` [ ] `},
		{name: "objects and scalars", in: `[{"a":1}, 2 ,"x",null]`, rows: []want{{raw: `{"a":1}`}, {raw: `2`}, {raw: `"x"`}, {raw: `null`}}},
		{name: "brackets and escaped quotes inside strings", in: `[{"t":"]},[{\"\\"},{"u":"\\"}]`,
			rows: []want{{raw: `{"t":"]},[{\"\\"}`}, {raw: `{"u":"\\"}`}}},
		{name: "nested arrays", in: `[[1,[2]],{"a":[{}]}]`, rows: []want{{raw: `[1,[2]]`}, {raw: `{"a":[{}]}`}}},
		{name: "empty elements are skipped", in: `[,{"id":"a"}, ,]`, rows: []want{{raw: `{"id":"a"}`, id: "a"}}},
		{name: "ids", in: `[{"id":"a"},{"x":{"id":"inner"},"id":7},{"\u0069d":"esc"},{"id":"first","id":"second"},{"id":""},{"id":{"a":1}},{"x":"y"}, {"id" : "spaced" }]`,
			rows: []want{{raw: `{"id":"a"}`, id: "a"}, {raw: `{"x":{"id":"inner"},"id":7}`, id: "7"}, {raw: `{"\u0069d":"esc"}`, id: "esc"},
				{raw: `{"id":"first","id":"second"}`, id: "second"}, {raw: `{"id":""}`}, {raw: `{"id":{"a":1}}`}, {raw: `{"x":"y"}`},
				{raw: `{"id" : "spaced" }`, id: "spaced"}}},
		{name: "invalid JSON row keeps its id", in: `[{"id":"bad", x},{"id":"ok"}]`, rows: []want{{raw: `{"id":"bad", x}`, id: "bad"}, {raw: `{"id":"ok"}`, id: "ok"}}},
		{name: "oversized row, id last", in: `[{"id":"s"},{"summary":"` + long + `","id":"big"},{"id":"t"}]`, maxRow: 40,
			rows: []want{{raw: `{"id":"s"}`, id: "s"}, {over: true, id: "big"}, {raw: `{"id":"t"}`, id: "t"}}},
		{name: "oversized row, id first, escapes in the large value", in: `[{"id":"big","summary":"` + strings.Repeat(`\"\\`, 40) + `"}]`, maxRow: 40,
			rows: []want{{over: true, id: "big"}}},
		{name: "id too long to be kept", in: `[{"id":"` + strings.Repeat("i", maxScanID) + `"}]`, maxRow: 1 << 20,
			rows: []want{{raw: `{"id":"` + strings.Repeat("i", maxScanID) + `"}`}}},
		{name: "deep nesting costs only its row", in: `[` + deepRow("deep", 100_000) + `,{"id":"next"}]`, maxRow: 1 << 20,
			rows: []want{{raw: deepRow("deep", 100_000), id: "deep"}, {raw: `{"id":"next"}`, id: "next"}}},
		{name: "cut inside the second row", in: `[{"id":"a"},{"id":"b`, rows: []want{{raw: `{"id":"a"}`, id: "a"}}, wantErr: errNotArray},
		{name: "a row the input ends in is not complete", in: `[{"id":"a"},{"id":"b"}`, rows: []want{{raw: `{"id":"a"}`, id: "a"}}, wantErr: errNotArray},
		{name: "not an array", in: `{"rows":[]}`, wantErr: errNotArray},
		{name: "nothing", in: ``, wantErr: errNotArray},
	}
	for _, tc := range tests {
		for _, split := range []bool{false, true} {
			name := tc.name
			if split {
				name += " (one byte per read)"
			}
			t.Run(name, func(t *testing.T) {
				maxRow := tc.maxRow
				if maxRow == 0 {
					maxRow = 1 << 10
				}
				var in io.Reader = strings.NewReader(tc.in)
				if split {
					in = oneByte{in}
				}
				rows, err := scanAll(in, maxRow)
				if (err == nil) != (tc.wantErr == nil) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if len(rows) != len(tc.rows) {
					t.Fatalf("%d rows, want %d", len(rows), len(tc.rows))
				}
				for i, w := range tc.rows {
					r := rows[i]
					if r.Oversized() != w.over || (!w.over && string(r.Raw) != w.raw) || r.ID != w.id {
						t.Errorf("row %d = %.80q id %q oversized %v, want %.80q id %q oversized %v", i, r.Raw, r.ID, r.Oversized(), w.raw, w.id, w.over)
					}
				}
			})
		}
	}
}

// A 100 MB row whose id comes last is streamed past with memory bounded by the row cap: it comes
// back oversized, with its id and size, and the row after it is read.
func TestRowScannerHugeRowBoundedMemory(t *testing.T) {
	// Not parallel: the allocation it bounds is read from the process-wide MemStats.
	const huge = 100 << 20
	in := io.MultiReader(strings.NewReader("["), moleculetest.LargeRow("huge", huge, true)(), strings.NewReader(`,{"id":"after"}]`))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rows, err := scanAll(in, 1<<20)
	runtime.ReadMemStats(&after)
	must(t, err)
	if len(rows) != 2 || !rows[0].Oversized() || rows[0].ID != "huge" || rows[0].Size < huge || rows[1].ID != "after" {
		t.Fatalf("rows = %d, first oversized %v id %q size %d", len(rows), len(rows) > 0 && rows[0].Oversized(), rows[0].ID, rows[0].Size)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("reading a 100 MB row allocated %d MB; want it bounded by the 1 MB row cap", alloc>>20)
	}
}

// rowsOf is the ids of rows.
func rowsOf(rows []Row) string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return strings.Join(ids, ",")
}

// page builds an activity page of rows with the given ids, each row padded to 20 bytes.
func page(ids ...string) string {
	rows := make([]string, len(ids))
	for i, id := range ids {
		r := `{"id":"` + id + `","p":"`
		rows[i] = r + strings.Repeat("p", 20-len(r)-2) + `"}`
	}
	return "[" + strings.Join(rows, ",") + "]"
}

// keepCase is one page-keeping case: the rows kept (ids, in answer order) from in under lim.
type keepCase struct {
	name string
	in   string
	lim  PageLimits
	want string
	more bool
	err  bool
}

func runKeepCases(t *testing.T, keep func(*rowScanner, PageLimits) (Page, error), tests []keepCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pg, err := keep(newRowScanner(strings.NewReader(tc.in), 1<<10), tc.lim)
			if got := rowsOf(pg.Rows); got != tc.want || pg.More != tc.more || (err != nil) != tc.err {
				t.Fatalf("kept %s more %v err %v, want %s more %v error %v", got, pg.More, err, tc.want, tc.more, tc.err)
			}
		})
	}
}

func TestKeepOldestFirst(t *testing.T) {
	t.Parallel()
	runKeepCases(t, keepOldestFirst, []keepCase{
		{name: "all fit", in: page("a", "b", "c"), lim: PageLimits{Rows: 10, Bytes: 100}, want: "a,b,c"},
		{name: "row limit", in: page("a", "b", "c"), lim: PageLimits{Rows: 2, Bytes: 100}, want: "a,b", more: true},
		{name: "byte limit", in: page("a", "b", "c", "d"), lim: PageLimits{Rows: 10, Bytes: 50}, want: "a,b,c", more: true},
		{name: "a row over the byte limit is kept alone", in: page("a", "b"), lim: PageLimits{Rows: 10, Bytes: 5}, want: "a", more: true},
		{name: "failure keeps the rows before it", in: page("a", "b")[:30], lim: PageLimits{Rows: 10, Bytes: 100}, want: "a", err: true},
	})
}

func TestKeepOldestOfWindow(t *testing.T) {
	t.Parallel()
	newestFirst := page("e", "d", "c", "b", "a") // a is the oldest
	runKeepCases(t, keepOldestOfWindow, []keepCase{
		{name: "all fit, oldest first", in: newestFirst, lim: PageLimits{Rows: 10, Bytes: 1000}, want: "a,b,c,d,e"},
		{name: "row limit keeps the oldest", in: newestFirst, lim: PageLimits{Rows: 2, Bytes: 1000}, want: "a,b", more: true},
		{name: "byte limit keeps the oldest", in: newestFirst, lim: PageLimits{Rows: 10, Bytes: 60}, want: "a,b,c", more: true},
		{name: "the oldest row is kept even over the byte limit", in: newestFirst, lim: PageLimits{Rows: 10, Bytes: 5}, want: "a", more: true},
		{name: "failure keeps nothing", in: newestFirst[:50], lim: PageLimits{Rows: 10, Bytes: 1000}, err: true},
	})
}

// FuzzRowScanner: no panic on any input, no row held over the cap, and on every array encoding/json
// accepts, the same elements and, for objects, the same id normalize would read.
func FuzzRowScanner(f *testing.F) {
	for _, s := range []string{
		`[]`, `[{"id":"a","x":[1,{"y":"]"}]},2,"s",null]`, `[{"\u0069d":5}]`, `[{"id":"a","id":"b"}]`,
		`[{"id":"a"`, `{"id":"a"}`, `[{"t":"\\\"}"}]`, `[ {"id" : 1e3 } , {"id":-0.5}]`, `[[[[]]]]`,
	} {
		f.Add([]byte(s), 64)
	}
	f.Fuzz(func(t *testing.T, in []byte, maxRow int) {
		maxRow = 1 + abs(maxRow)%(1<<12)
		rows, err := scanAll(strings.NewReader(string(in)), maxRow)
		for _, r := range rows {
			if len(r.Raw) > maxRow {
				t.Fatalf("row of %d bytes held with a cap of %d", len(r.Raw), maxRow)
			}
		}
		var elems []json.RawMessage
		if json.Unmarshal(in, &elems) != nil || len(in) > maxRow {
			return
		}
		if err != nil || len(rows) != len(elems) {
			t.Fatalf("scanner: %d rows, %v; encoding/json: %d elements", len(rows), err, len(elems))
		}
		for i, e := range elems {
			if string(rows[i].Raw) != string(e) {
				t.Fatalf("row %d = %q, encoding/json %q", i, rows[i].Raw, e)
			}
			var obj map[string]json.RawMessage
			if json.Unmarshal(e, &obj) != nil || obj == nil {
				continue
			}
			want, _ := RawID(obj["id"])
			if rows[i].ID != want {
				t.Fatalf("row %d id = %q, encoding/json reads %q", i, rows[i].ID, want)
			}
		}
	})
}

// A row's fingerprint is the hash of its text, whether the row was kept or streamed past.
func TestRowFingerprint(t *testing.T) {
	t.Parallel()
	x, y := `{"summary":"`+strings.Repeat("x", 200)+`"}`, `{"summary":"`+strings.Repeat("y", 200)+`"}`
	in := "[" + x + "," + x + "," + y + "]"
	kept, err := scanAll(strings.NewReader(in), 1<<10)
	must(t, err)
	skipped, err := scanAll(strings.NewReader(in), 50)
	must(t, err)
	if kept[0].Oversized() || !skipped[0].Oversized() {
		t.Fatal("test rows not kept and skipped as intended")
	}
	for i := range kept {
		if kept[i].Fingerprint() != skipped[i].Fingerprint() {
			t.Errorf("row %d: fingerprint %s kept, %s streamed past", i, kept[i].Fingerprint(), skipped[i].Fingerprint())
		}
	}
	if kept[0].Fingerprint() != kept[1].Fingerprint() || kept[0].Fingerprint() == kept[2].Fingerprint() {
		t.Error("equal rows differ or different rows match")
	}
}

// deepRow is a row whose text parts are nested n levels deep: past encoding/json's limit (10,000)
// no decoder accepts it.
func deepRow(id string, n int) string {
	return `{"id":"` + id + `","activity_type":"a2a_receive","method":"message/send","request_body":{"params":{"message":{"parts":` +
		strings.Repeat("[", n) + strings.Repeat("]", n) + `}}}}`
}

func abs(n int) int {
	if n < 0 {
		if n == -n { // math.MinInt
			return 0
		}
		return -n
	}
	return n
}
