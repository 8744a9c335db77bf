package ledger

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// readState reads the ledger's state file as written.
func readState(t *testing.T, dir string) stateFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, StateFileName))
	if err != nil {
		t.Fatalf("read state: %v", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("parse state: %v\n%s", err, b)
	}
	return st
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
