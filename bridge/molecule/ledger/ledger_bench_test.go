package ledger

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/childproc"
)

// defaultRecentIDs is the inbox's default RecentIDs (molecule.DefaultRecentIDs), which the
// benchmark measures at; the ledger cannot import the inbox that configures it.
const defaultRecentIDs = 4096

// BenchmarkLedgerBytesPerMessage measures what the inbox's durable state costs per message once
// the default number of finished ids (defaultRecentIDs) is remembered: a message is admitted, its
// reply stored before delivery, then finished, with a sync after each step as the inbox does.
// write-B/msg is every byte the process handed to write(2) (/proc/self/io wchar).
func BenchmarkLedgerBytesPerMessage(b *testing.B) {
	l, err := Open(Config{Dir: b.TempDir(), WorkspaceID: "ws-1", RecentIDs: defaultRecentIDs})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	message := func() {
		id := fmt.Sprintf("%08d-0000-4000-8000-000000000000", n)
		n++
		l.Admit(id, int64(n))
		l.SetPending(Reply{ActivityID: id, ChatKey: "canvas:ws-1", Route: Route{"notify", "ws-1"}, Text: "a short answer", MessageID: "m-" + id, AnsweredAt: time.Now()})
		if err := l.Sync(); err != nil {
			b.Fatal(err)
		}
		l.MarkDone(id)
		if err := l.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	for range defaultRecentIDs + 100 { // the steady state: the ring of finished ids is full
		message()
	}
	w0 := procWriteChars(b)
	m := 0
	for b.Loop() {
		message()
		m++
	}
	b.ReportMetric(float64(procWriteChars(b)-w0)/float64(m), "write-B/msg")
}

func procWriteChars(tb testing.TB) int64 {
	tb.Helper()
	n, err := childproc.ProcFS{}.WriteChars(os.Getpid())
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
