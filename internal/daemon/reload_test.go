package daemon

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"
)

// What `supervisor reload` is told on the control socket while the daemon does not serve. An
// image a reload started is that reload still under way (the old image handed everything over
// and is gone), so it says so, and a daemon given back by a new binary that could not take over
// says that; a daemon starting or stopping of its own says which.
func TestReloadRefusedUntilTheDaemonServes(t *testing.T) {
	t.Parallel()
	doc := &handoff.Doc{WrittenBy: "v1", Attempts: 1, Reloads: 1, Trigger: "control socket", Executable: "/usr/bin/supervisor"}
	for _, tc := range []struct {
		name      string
		phase     int32
		handoff   *handoff.Doc
		givenBack string
		want      []string
	}{
		{"a reload's new image starting", phaseStarting, doc, "",
			[]string{"a reload is already in progress", "the new image is starting", "try again once it serves"}},
		{"the old image starting again after a give-back", phaseStarting, doc, "it did not take over within 1m0s",
			[]string{"a reload is already in progress", "the previous image is starting again", "try again once it serves"}},
		{"starting", phaseStarting, nil, "", []string{"the daemon is starting", "try again once it serves"}},
		{"stopping", phaseDraining, nil, "", []string{"the daemon is stopping"}},
		{"a reloaded image stopping", phaseDraining, doc, "", []string{"the daemon is stopping"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &daemon{log: zap.NewNop(), mt: NewMainThread(), reloadReq: make(chan string, 1)}
			if tc.handoff != nil {
				d.continueFrom(tc.handoff, tc.givenBack)
			}
			d.phase.Store(tc.phase)
			// Not t.TempDir: the control socket's path must stay under the 108 bytes of a unix
			// socket address.
			dir, err := os.MkdirTemp("", "cwreload-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			c, err := startControl(controlConfig{dir: dir, status: func() control.StatusDoc { return control.StatusDoc{} },
				ready: http.NotFoundHandler(), reload: d.requestReload, errs: make(chan error, 1), log: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ans, err := control.NewClient(dir).Reload(ctx)
			var refused *control.Error
			if !errors.As(err, &refused) || refused.Status != http.StatusConflict {
				t.Fatalf("reload = %+v, %v; want it refused with 409", ans, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(refused.Msg, w) {
					t.Errorf("refused with %q, want it to say %q", refused.Msg, w)
				}
			}
			if len(d.reloadReq) != 0 {
				t.Error("a refused reload was asked of the main loop")
			}
		})
	}
}

// The image a reload started says "starting" until it serves, then "ok": status and `supervisor
// reload` never call a reload ok while its image still adopts the children and opens the inbox.
// A give-back stays "failed" when the old image serves again.
func TestReloadOutcomeStartingUntilServing(t *testing.T) {
	t.Parallel()
	doc := &handoff.Doc{WrittenBy: "v1", Attempts: 2, Reloads: 1, Trigger: "SIGHUP", Executable: "/usr/bin/supervisor"}
	for _, tc := range []struct {
		name                     string
		givenBack                string
		beforeServing, atServing string
	}{
		{"took over", "", "starting", "ok"},
		{"given back", "it did not take over within 1m0s", "failed", "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &daemon{log: zap.NewNop(), info: control.DaemonInfo{Version: "v2"}}
			d.continueFrom(doc, tc.givenBack)
			if got := d.reloadInfo(); got == nil || got.Outcome != tc.beforeServing || got.Attempt != 2 {
				t.Fatalf("before serving: %+v, want outcome %q of attempt 2", got, tc.beforeServing)
			}
			d.reloadServed()
			if got := d.reloadInfo(); got.Outcome != tc.atServing {
				t.Fatalf("once serving: outcome %q, want %q", got.Outcome, tc.atServing)
			}
		})
	}
}
