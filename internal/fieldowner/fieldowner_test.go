package fieldowner

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestStraysNamesTheFieldAndItsPlace(t *testing.T) {
	p, err := Load("testdata/parts")
	if err != nil {
		t.Fatal(err)
	}
	strays, err := p.Strays(map[string][]string{"pool": {"pool.go"}, "Top": {"top.go"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(strays) != 1 {
		t.Fatalf("strays = %+v, want the one use of pool.slots in top.go", strays)
	}
	s := strays[0]
	if s.Type != "pool" || s.Field != "slots" || s.Pos.Line != 14 {
		t.Fatalf("stray = %+v, want pool.slots at top.go:14", s)
	}
	// The owner's own file may touch the field; with top.go among the owners nothing strays.
	strays, err = p.Strays(map[string][]string{"pool": {"pool.go", "top.go"}})
	if err != nil || len(strays) != 0 {
		t.Fatalf("with top.go an owner: strays = %+v, err = %v", strays, err)
	}
}

func TestStraysRefusesAStaleOwnerList(t *testing.T) {
	p, err := Load("testdata/parts")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Strays(map[string][]string{"gone": {"pool.go"}}); err == nil {
		t.Fatal("a type that does not exist was accepted")
	}
	if _, err := p.Strays(map[string][]string{"pool": {"moved.go"}}); err == nil {
		t.Fatal("an owner file that does not exist was accepted")
	}
}

func TestMethodsCountsFunctionsThatTakeTheType(t *testing.T) {
	p, err := Load("testdata/parts")
	if err != nil {
		t.Fatal(err)
	}
	n, embedded, err := p.Methods("Top")
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || len(embedded) != 0 { // Run, reset
		t.Fatalf("Top: %d methods and functions, embedded %v; want 2 and none", n, embedded)
	}
	_, embedded, err = p.Methods("embedsPool")
	if err != nil {
		t.Fatal(err)
	}
	if len(embedded) != 1 || embedded[0] != "pool" {
		t.Fatalf("embedsPool embeds %v, want [pool]", embedded)
	}
}

func TestStrangersAreFunctionsOfOtherTypes(t *testing.T) {
	p, err := Load("testdata/receivers")
	if err != nil {
		t.Fatal(err)
	}
	offences, err := p.Strangers(map[string]Access{"pool": Writes, "counter": Writes, "guard": Uses})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range offences {
		got = append(got, fmt.Sprintf("%d %s %s.%s", o.Pos.Line, o.By, o.Type, o.Name))
	}
	want := []string{
		"50 Top.steal pool.slots",
		"53 Top.drain pool.mu", // locking another part's mutex changes it: a lock shared across types
		"55 Top.drain pool.mu",
		"58 Top.count pool.inner",
		"63 Top.later pool.waiters",
		"66 Top.peek guard.p",
		"70 Top.fresh pool.slots",
		"72 clearWaiters pool.waiters",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("offences:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := p.Strangers(map[string]Access{"gone": Writes}); err == nil {
		t.Fatal("a part that does not exist was accepted")
	}
}

func TestCrossLockedNamesTheCallerAndTheMethod(t *testing.T) {
	p, err := Load("testdata/receivers")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range p.CrossLocked() {
		got = append(got, fmt.Sprintf("%d %s %s.%s", o.Pos.Line, o.By, o.Type, o.Name))
	}
	// pool.take's own call of takeLocked is the rule kept.
	if want := []string{"54 Top.drain pool.takeLocked"}; !slices.Equal(got, want) {
		t.Fatalf("cross-type …Locked calls: %v, want %v", got, want)
	}
}

func TestLongerNamesTheFunctionAndItsLength(t *testing.T) {
	p, err := Load("testdata/receivers")
	if err != nil {
		t.Fatal(err)
	}
	got := p.Longer(121)
	if len(got) != 1 || got[0].By != "long" || got[0].Name != "122" || got[0].Pos.Line != 4 {
		t.Fatalf("longer than 121 lines: %+v, want long, 122 lines, at line 4", got)
	}
	if got := p.Longer(122); len(got) != 0 {
		t.Fatalf("longer than 122 lines: %+v, want none", got)
	}
}
