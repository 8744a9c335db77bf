package exectest

import (
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Many goroutines write scripts and run them at once, each forking while others write: none
// meets "text file busy".
func TestWriteExecutableRunsAtOnce(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := filepath.Join(dir, "s"+string(rune('a'+i%26))+string(rune('a'+i/26)))
			if err := WriteExecutable(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Error(err)
				return
			}
			if err := exec.Command(p).Run(); err != nil {
				t.Errorf("run %s: %v", p, err)
			}
		}()
	}
	wg.Wait()
}
