package molecule

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
)

// ProbePlatform reads the activity feed once and changes nothing on the platform: no register,
// no heartbeat, no ack. A rejected token comes back as an Unauthorized *platform.HTTPError, a platform
// that is not there as an error.
func TestProbePlatform(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	cfg := Config{PlatformURL: p.URL(), WorkspaceID: p.WorkspaceID(), Token: p.Token()}
	if err := ProbePlatform(context.Background(), cfg); err != nil {
		t.Fatalf("probe: %v", err)
	}
	calls := p.Calls()
	if len(calls) != 1 || calls[0].Route != moleculetest.RouteActivity || calls[0].Method != http.MethodGet {
		t.Fatalf("calls %+v, want one GET of the activity feed", calls)
	}

	cfg.Token = "wrong"
	var he *platform.HTTPError
	if err := ProbePlatform(context.Background(), cfg); !errors.As(err, &he) || !he.Unauthorized() {
		t.Errorf("wrong token: %v, want an Unauthorized platform.HTTPError", err)
	}
	if strings.Contains(fmt.Sprint(ProbePlatform(context.Background(), cfg)), "wrong") {
		t.Error("the error quotes the token")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	dead := "http://" + ln.Addr().String()
	must(t, ln.Close())
	if err := ProbePlatform(context.Background(), Config{PlatformURL: dead, WorkspaceID: "ws", Token: "t"}); err == nil {
		t.Error("closed port: no error")
	}
}

// ProbeEventStream connects once and hangs up: true where the platform serves the stream, false
// where it answers 404, an error for a refused token.
func TestProbeEventStream(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	cfg := Config{PlatformURL: p.URL(), WorkspaceID: p.WorkspaceID(), Token: p.Token()}
	if offered, err := ProbeEventStream(context.Background(), cfg); !offered || err != nil {
		t.Fatalf("probe of a platform with the stream: %v, %v", offered, err)
	}
	if n := p.StreamConnects(); n != 1 {
		t.Errorf("%d connects, want 1", n)
	}
	must(t, p.WaitFor(waitCtx(t), func() bool { return p.StreamsOpen() == 0 }))
	p.SetEventStream(false)
	if offered, err := ProbeEventStream(context.Background(), cfg); offered || err != nil {
		t.Fatalf("probe of a platform without the stream: %v, %v", offered, err)
	}
	p.SetEventStream(true)
	cfg.Token = "wrong-token-0123"
	var he *platform.HTTPError
	if _, err := ProbeEventStream(context.Background(), cfg); !errors.As(err, &he) || !he.Unauthorized() {
		t.Fatalf("probe with a refused token: %v", err)
	}
}
