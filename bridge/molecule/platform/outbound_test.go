package platform

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// An empty reply is never sent empty: the platform refuses a notify without a message.
func TestNoEmptyReply(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	c, err := New(Options{URL: p.URL(), WorkspaceID: p.WorkspaceID(), Token: p.Token(), RequestTimeout: time.Minute}, http.DefaultClient)
	must(t, err)
	must(t, c.Notify(context.Background(), p.WorkspaceID(), "k", " \n"))
	if _, err := c.A2ASend(context.Background(), "peer-1", "m-1", "k", "", ""); err != nil {
		t.Fatal(err)
	}
	if n := p.Notifies(); len(n) != 1 || n[0].Message != textNoAnswer {
		t.Fatalf("notifies %+v", n)
	}
	if s := p.A2ASends(); len(s) != 1 || s[0].Text != textNoAnswer {
		t.Fatalf("sends %+v", s)
	}
}
