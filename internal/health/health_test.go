package health

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Every check passing answers 200 "ready"; one failing answers 503 with its name and error in
// the reason, and every check's outcome listed.
func TestReadinessAnswers(t *testing.T) {
	var loginErr error
	r := NewReadiness(Config{Checks: []Check{
		{Name: "inbox", Run: func(context.Context) error { return nil }},
		{Name: "codex_login", Run: func(context.Context) error { return loginErr }},
	}})
	probe := func() (int, Report) {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		var rep Report
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			t.Fatalf("body %q: %v", rec.Body.String(), err)
		}
		return rec.Code, rep
	}
	if code, rep := probe(); code != http.StatusOK || !rep.Ready() || rep.Reason != "" || len(rep.Checks) != 2 {
		t.Errorf("all passing: %d %+v", code, rep)
	}
	loginErr = errors.New("codex is not logged in")
	code, rep := probe()
	if code != http.StatusServiceUnavailable || rep.Ready() || rep.Reason != "codex_login: codex is not logged in" {
		t.Errorf("one failing: %d %+v", code, rep)
	}
	if want := (Result{Name: "codex_login", Error: "codex is not logged in"}); len(rep.Checks) != 2 || !rep.Checks[0].OK || rep.Checks[1] != want {
		t.Errorf("checks: %+v", rep.Checks)
	}
}

// A check that outlives the probe's timeout sees its context end and fails the probe.
func TestReadinessTimeout(t *testing.T) {
	r := NewReadiness(Config{Timeout: 1, Checks: []Check{{Name: "slow", Run: func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}}}})
	if rep := r.Check(context.Background()); rep.Ready() || rep.Checks[0].Error != context.DeadlineExceeded.Error() {
		t.Errorf("report %+v", rep)
	}
}

func TestLive(t *testing.T) {
	rec := httptest.NewRecorder()
	Live(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "{\"status\":\"ok\"}\n" {
		t.Errorf("%d %q", rec.Code, rec.Body.String())
	}
}
