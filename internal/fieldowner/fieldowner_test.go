package fieldowner

import (
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
