// Package health answers liveness and readiness probes over HTTP. Liveness (/healthz) says the
// process is up and serving HTTP. Readiness (/readyz) runs named checks and answers 503 with the
// reasons of those that failed, so a load balancer, an orchestrator or an operator's script sends
// no work to a daemon that cannot do it, and learns why. One Readiness serves every listener
// that exposes the probes, so they all answer alike.
package health

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// DefaultTimeout bounds one readiness probe, all checks together. A check that starts a process
// (a codex login check) must fit in it.
const DefaultTimeout = 10 * time.Second

// Check is one readiness condition.
type Check struct {
	// Name is short and stable ("inbox", "state_dir"): probes and scripts key on it.
	Name string
	// Run returns nil when the condition holds, else an error saying what is wrong and, where it
	// can, what to do. It must return when ctx is done.
	Run func(ctx context.Context) error
}

// Config configures a Readiness.
type Config struct {
	// Checks run in order on every probe.
	Checks []Check
	// Timeout bounds one probe; default DefaultTimeout.
	Timeout time.Duration
}

// Readiness runs the checks of a readiness probe. It is safe for concurrent use; each probe runs
// the checks anew (they must be cheap or rate-limit themselves).
type Readiness struct {
	cfg Config
}

// NewReadiness returns a Readiness for cfg. With no checks it is always ready.
func NewReadiness(cfg Config) *Readiness {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Readiness{cfg: cfg}
}

// Status values of a Report.
const (
	StatusReady    = "ready"
	StatusNotReady = "not ready"
)

// Report is the outcome of one probe, and the JSON body of /readyz.
type Report struct {
	// Status is StatusReady or StatusNotReady.
	Status string `json:"status"`
	// Reason joins the errors of the failed checks ("name: error; ..."); empty when ready.
	Reason string `json:"reason,omitempty"`
	// Checks has one entry per check, in order.
	Checks []Result `json:"checks"`
}

// Ready reports whether every check passed.
func (r Report) Ready() bool { return r.Status == StatusReady }

// Result is one check's outcome.
type Result struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Check runs every check within the probe's timeout and reports.
func (r *Readiness) Check(ctx context.Context) Report {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	rep := Report{Status: StatusReady, Checks: make([]Result, 0, len(r.cfg.Checks))}
	var reasons []string
	for _, c := range r.cfg.Checks {
		res := Result{Name: c.Name, OK: true}
		if err := c.Run(ctx); err != nil {
			res.OK, res.Error = false, err.Error()
			reasons = append(reasons, c.Name+": "+res.Error)
		}
		rep.Checks = append(rep.Checks, res)
	}
	if len(reasons) > 0 {
		rep.Status, rep.Reason = StatusNotReady, strings.Join(reasons, "; ")
	}
	return rep
}

// ServeHTTP answers a readiness probe: 200 with the Report when ready, 503 with it otherwise.
func (r *Readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	rep := r.Check(req.Context())
	status := http.StatusOK
	if !rep.Ready() {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, rep)
}

// Live answers a liveness probe: 200 {"status":"ok"} whenever the process can answer at all.
func Live(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
