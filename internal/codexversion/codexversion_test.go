package codexversion

import (
	"os"
	"regexp"
	"testing"
)

// The Makefile's pin, the codex the tests run by default and `make install` ships, lies within
// the tested range.
func TestMakefilePinIsWithinTheRange(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CODEX_VERSION\s*\?=\s*(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Makefile sets no CODEX_VERSION")
	}
	if where, err := Range(string(m[1])); err != nil || where != 0 {
		t.Fatalf("Makefile CODEX_VERSION %s is outside the tested range %s to %s (%d, %v)", m[1], Oldest, Newest, where, err)
	}
	if c, err := Compare(Oldest, Newest); err != nil || c > 0 {
		t.Fatalf("Oldest %s above Newest %s (%v)", Oldest, Newest, err)
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.2.3", "1.2.3", 0},
		{"1.2.3", "1.2.4", -1},
		{"1.10.0", "1.9.9", 1},
		{"2.0.0", "1.99.99", 1},
		{"1.2.3-alpha.1", "1.2.3", -1},
		{"1.2.3", "1.2.3-alpha.1", 1},
		{"1.2.3-alpha.1", "1.2.3-alpha.2", -1},
		{"1.2.4-alpha.1", "1.2.3", 1},
	} {
		if got, err := Compare(tc.a, tc.b); err != nil || got != tc.want {
			t.Errorf("Compare(%s, %s) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "1.2", "1.2.x", "v1.2.3", "1.2.3.4", "1.-2.3", "1.+2.3"} {
		if _, err := Compare(bad, "1.2.3"); err == nil {
			t.Errorf("Compare(%q) took it", bad)
		}
	}
}

// Both ends of the range are within it; versions beyond either end are not.
func TestRange(t *testing.T) {
	t.Parallel()
	for _, v := range []string{Oldest, Newest} {
		if where, err := Range(v); err != nil || where != 0 {
			t.Errorf("Range(%s) = %d, %v; want 0", v, where, err)
		}
	}
	for v, want := range map[string]int{"0.0.1": -1, "999.0.0": 1, Oldest + "-alpha.1": -1} {
		if where, err := Range(v); err != nil || where != want {
			t.Errorf("Range(%s) = %d, %v; want %d", v, where, err, want)
		}
	}
	if _, err := Range("not a version"); err == nil {
		t.Error("Range took a version it cannot read")
	}
}
