package turnwatch

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// The first-answer watch: a model that sends nothing trips it after the bound, as an
// unreachable model; the turn's own notifications (turn/started, the user's message, status
// changes, codex's warnings) do not count as an answer; the model's first item disarms it for
// good, however long the turn then takes.
func TestModelSilent(t *testing.T) {
	note := func(method, params string) protocol.Notification {
		return protocol.Notification{Method: method, Params: []byte(params)}
	}
	codexOwn := []protocol.Notification{
		note(protocol.NotifyTurnStarted, `{"turn":{"id":"u","status":"inProgress"}}`),
		note(protocol.NotifyItemStarted, `{"item":{"type":"userMessage","id":"m"}}`),
		note(protocol.NotifyItemCompleted, `{"item":{"type":"userMessage","id":"m"}}`),
		note(protocol.NotifyThreadStatus, `{"status":{"type":"active","activeFlags":[]}}`),
		note("warning", `{"message":"Falling back from WebSockets to HTTPS transport. stream disconnected before completion: idle timeout waiting for websocket"}`),
	}
	for _, tc := range []struct {
		name  string
		notes []protocol.Notification
		trip  bool
	}{
		{"nothing from the model", codexOwn, true},
		{"a reasoning item", append(codexOwn, note(protocol.NotifyItemStarted, `{"item":{"type":"reasoning","id":"r"}}`)), false},
		{"a delta", append(codexOwn, note(protocol.NotifyAgentMessageDelta, `{"delta":"h"}`)), false},
		{"token usage", append(codexOwn, note(protocol.NotifyTokenUsageUpdated, `{}`)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tripped := make(chan error, 1)
				start := time.Now()
				var at time.Time
				w := New(0, 0, -1, func(err error) {
					at = time.Now()
					tripped <- err
				})
				defer w.Stop()
				w.ExpectModel(2 * time.Minute)
				for _, n := range tc.notes {
					time.Sleep(time.Second)
					w.Observe(n)
				}
				time.Sleep(time.Hour)
				synctest.Wait()
				select {
				case err := <-tripped:
					var trip *TripError
					if !tc.trip || !errors.As(err, &trip) || trip.Watchdog != ModelUnreachable {
						t.Fatalf("tripped: %v", err)
					}
					if d := at.Sub(start); d != 2*time.Minute {
						t.Errorf("tripped after %s, want 2m from the turn's start", d)
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
