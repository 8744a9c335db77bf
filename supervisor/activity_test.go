package supervisor

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestStatusShowsActivity: while a turn runs, the chat's status row says what it does now and
// since when: thinking from the start, then the running command from the moment it started;
// once the turn is over the row has no activity.
func TestStatusShowsActivity(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		start := time.Now()
		p := submitAsync(context.Background(), s, "a", "progress:g")
		synctest.Wait()
		row, ok, _ := s.ChatStatus("a")
		if !ok || row.Activity != ActivityThinking || !row.ActivitySince.Equal(start) {
			t.Fatalf("at start: ok %v, activity %q since %v, want thinking since %v", ok, row.Activity, row.ActivitySince, start)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		cmdStart := time.Now()
		time.Sleep(2*time.Minute + 10*time.Second)
		row, _, _ = s.ChatStatus("a")
		if want := `running "npm test"`; row.Activity != want || !row.ActivitySince.Equal(cmdStart) {
			t.Fatalf("during the command: activity %q since %v, want %q since %v", row.Activity, row.ActivitySince, want, cmdStart)
		}
		if time.Since(row.ActivitySince) != 2*time.Minute+10*time.Second {
			t.Errorf("activity age %s", time.Since(row.ActivitySince))
		}
		if acts := s.Activity(); len(acts) != 1 || acts[0] != (ChatActivity{ChatKey: "a", What: row.Activity, Since: cmdStart}) {
			t.Errorf("Activity() = %+v", acts)
		}
		b, _ := json.Marshal(row)
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil || doc["activity"] != `running "npm test"` || doc["activity_since"] == nil {
			t.Errorf("json row %s lacks activity fields", b)
		}
		w.open("g")
		if _, err := p.wait(); err != nil {
			t.Fatal(err)
		}
		if acts := s.Activity(); len(acts) != 0 {
			t.Errorf("Activity() after the turn = %+v", acts)
		}
		row, _, _ = s.ChatStatus("a")
		if row.Activity != "" || !row.ActivitySince.IsZero() {
			t.Errorf("idle chat shows activity %q since %v", row.Activity, row.ActivitySince)
		}
	})
}

// TestWithProgress: a message submitted with WithProgress sees its turn's steps in order, each
// with a one-line summary, and nothing after Submit returned.
func TestWithProgress(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		var mu sync.Mutex
		var got []string
		ctx := WithProgress(context.Background(), func(p TurnProgress) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, p.Kind+" "+p.TurnID+" "+p.ItemType+" "+p.Summary)
		})
		p := submitAsync(ctx, s, "a", "progress:g")
		synctest.Wait()
		w.open("g")
		if _, err := p.wait(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		want := []string{
			"turn_started turn-1  ",
			"item_started turn-1 reasoning thinking",
			"item_completed turn-1 reasoning thought",
			`item_started turn-1 commandExecution running "npm test"`,
			`item_completed turn-1 commandExecution ran "npm test" (completed)`,
			"item_started turn-1 agentMessage writing",
		}
		if !slices.Equal(got, want) {
			t.Errorf("progress:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		// Without WithProgress nothing is reported and nothing breaks.
		if _, err := s.Submit(context.Background(), "a", "plain"); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("a message without an observer reported steps: %v", got[len(want):])
		}
	})
}
