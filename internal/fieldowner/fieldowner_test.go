package fieldowner

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

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
