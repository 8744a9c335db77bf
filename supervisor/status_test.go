package supervisor

import (
	"os"
	"testing"
)

func TestProcessRSS(t *testing.T) {
	if rss := ProcessRSS(os.Getpid()); rss < 1<<20 {
		t.Errorf("ProcessRSS(self) = %d, want at least 1 MiB for a running Go test binary", rss)
	}
	for _, pid := range []int{0, -1, 1 << 30} {
		if rss := ProcessRSS(pid); rss != 0 {
			t.Errorf("ProcessRSS(%d) = %d, want 0 for no such process", pid, rss)
		}
	}
}
