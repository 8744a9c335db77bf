package turnwatch

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// unreachableNote is codex's report of a model it cannot reach (recorded on codex 0.169).
var unreachableNote = protocol.Notification{Method: protocol.NotifyError, Params: []byte(`{"error":{"additionalDetails":"Connection failed: error sending request","codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":null}},"message":"Reconnecting... waiting for network"},"willRetry":true,"threadId":"t","turnId":"u"}`)}

// The unreachable watch trips after exactly its bound from codex's first report, with codex's
// cause; codex's repeated reports do not restart it; anything from the model in between stops
// it; a slow model that sends nothing never trips it.
func TestModelUnreachableWatch(t *testing.T) {
	answer := protocol.Notification{Method: "item/agentMessage/delta", Params: []byte(`{"threadId":"t","turnId":"u","delta":"hi"}`)}
	for _, tc := range []struct {
		name  string
		steps func(w *Watch)
		trip  bool
	}{
		{"reports only", func(w *Watch) {
			w.Observe(unreachableNote)
			time.Sleep(7 * time.Second)
			w.Observe(unreachableNote)
			time.Sleep(10 * time.Second)
			w.Observe(unreachableNote)
		}, true},
		{"the model answers in between", func(w *Watch) {
			w.Observe(unreachableNote)
			time.Sleep(20 * time.Second)
			w.Observe(answer)
		}, false},
		{"a slow model that sends nothing", func(w *Watch) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tripped := make(chan error, 1)
				start := time.Now()
				var at time.Time
				w := New(0, 0, 30*time.Second, func(err error) {
					at = time.Now()
					tripped <- err
				})
				defer w.Stop()
				tc.steps(w)
				time.Sleep(10 * time.Minute)
				synctest.Wait()
				select {
				case err := <-tripped:
					var trip *TripError
					if !tc.trip || !errors.As(err, &trip) || trip.Watchdog != ModelUnreachable ||
						trip.Cause != "Connection failed: error sending request" {
						t.Fatalf("tripped: %v", err)
					}
					if d := at.Sub(start); d != 30*time.Second {
						t.Errorf("tripped after %s, want 30s from the first report", d)
					}
				default:
					if tc.trip {
						t.Fatal("no trip")
					}
				}
			})
		})
	}
}
