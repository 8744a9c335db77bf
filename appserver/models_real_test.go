package appserver_test

import (
	"slices"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// model/list gives codex's catalog (read here, never hard-coded: it differs between codex
// versions), and turn/start's model and effort reach the model's request, for that turn and,
// as codex keeps them in the thread, the later ones that name none.
func TestRealListModelsAndTurnModel(t *testing.T) {
	e := newRealEnv(t, mockmodel.Config{})
	c := e.start(t, nil)
	ctx := ctxTimeout(t, 2*time.Minute)
	models, err := c.ListModels(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(models) == 0 {
		t.Fatal("model/list gave no model")
	}
	// One model a page: every page is followed, and the catalog is the same.
	paged, err := appserver.ListModelsPaged(ctx, c, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(paged, models, func(a, b protocol.Model) bool { return a.ID == b.ID }) {
		t.Errorf("one model a page gave %d models, all at once %d", len(paged), len(models))
	}
	visible, err := c.ListModels(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(visible) > len(models) || slices.ContainsFunc(visible, func(m protocol.Model) bool { return m.Hidden }) {
		t.Errorf("without hidden models: %d of %d, some hidden", len(visible), len(models))
	}
	thread, err := c.StartThread(ctx, e.threadOpts(""))
	if err != nil {
		t.Fatal(err)
	}
	mustComplete(t, c, ctx, thread, "first")
	first := e.mock.Requests()[0]
	// A model other than the one the first request used, with an effort it supports.
	i := slices.IndexFunc(models, func(m protocol.Model) bool {
		return m.ID != first.Model && len(m.SupportedReasoningEfforts) > 1
	})
	if i < 0 {
		t.Skipf("codex's catalog has no model other than %q with efforts", first.Model)
	}
	m := models[i]
	// Not the model's default; codex 0.171 sends some levels as others ("ultra" as "xhigh"), the
	// second one as it is.
	effort := m.SupportedReasoningEfforts[1].ReasoningEffort
	res, err := c.RunTurn(ctx, thread, text("second"), appserver.TurnOptions{Model: m.ID, Effort: effort})
	if err != nil || res.Status != protocol.TurnCompleted {
		t.Fatalf("turn with model %s: %v %+v", m.ID, err, res)
	}
	mustComplete(t, c, ctx, thread, "third")
	reqs := e.mock.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	for n, r := range reqs[1:] {
		if r.Model != m.ID || r.Effort != effort {
			t.Errorf("request %d: model %q effort %q, want %q %q", n+2, r.Model, r.Effort, m.ID, effort)
		}
	}
	turns, err := c.ListTurns(ctx, thread, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 2 || !slices.Equal(turns[0].UserTexts, []string{"third"}) || !slices.Equal(turns[1].UserTexts, []string{"second"}) {
		t.Errorf("the two newest turns: %+v", turns)
	}
}
