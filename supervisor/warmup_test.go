package supervisor

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/appserver"
)

// warmCalls records what warmable fake children were asked, across children.
type warmCalls struct {
	mu    sync.Mutex
	fail  error    // WarmUp's answer
	calls []string // "warm thread name", "name thread name", "delete thread", in order
}

func (w *warmCalls) add(s string) {
	w.mu.Lock()
	w.calls = append(w.calls, s)
	w.mu.Unlock()
}

func (w *warmCalls) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls)
}

// warmChild is a fake child that can be warmed up.
type warmChild struct {
	Child
	rec *warmCalls
}

func (c warmChild) WarmUp(_ context.Context, threadID, name string, _ appserver.ThreadOptions) error {
	c.rec.add("warm " + threadID + " " + name)
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	return c.rec.fail
}

func (c warmChild) SetThreadName(_ context.Context, threadID, name string) error {
	c.rec.add("name " + threadID + " " + name)
	return nil
}

func (c warmChild) DeleteThread(_ context.Context, threadID string) error {
	c.rec.add("delete " + threadID)
	return nil
}

// warmSup is newSup whose children can be warmed up.
func warmSup(t *testing.T, w *fakeWorld, rec *warmCalls, mut func(*Config)) *Supervisor {
	return newSup(t, w, func(c *Config) {
		c.Spawn = func(ctx context.Context, key string) (Child, error) {
			ch, err := w.spawn(ctx, key)
			if err != nil {
				return nil, err
			}
			return warmChild{Child: ch, rec: rec}, nil
		}
		c.MaxChildren, c.Spares = 4, 1
		if mut != nil {
			mut(c)
		}
	})
}

// A spare is warmed under the placeholder name before it is ready; the chat that takes it for a
// new thread renames the thread after itself, and the replacement spare, closed untaken at
// shutdown, has its thread deleted.
func TestSpareWarmedRenamedAndUnusedDeleted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w, rec := newFakeWorld(), &warmCalls{}
		s := warmSup(t, w, rec, nil)
		synctest.Wait()
		spare := spareRows(s)[0]
		r := mustSubmit(t, s, "a", "a1")
		if r.ThreadID != spare.ThreadID {
			t.Fatalf("a ran on %s, want the spare's thread %s", r.ThreadID, spare.ThreadID)
		}
		synctest.Wait()
		second := spareRows(s)[0]
		shutdown(t, s)
		want := []string{
			"warm " + spare.ThreadID + " " + sparePlaceholderName,
			"name " + spare.ThreadID + " a",
			"warm " + second.ThreadID + " " + sparePlaceholderName,
			"delete " + second.ThreadID,
		}
		if got := rec.list(); !slices.Equal(got, want) {
			t.Fatalf("calls %q\nwant %q", got, want)
		}
	})
}

// A chat with a stored thread resumes it on the warmed spare, whose own thread is deleted.
func TestSpareThreadDeletedWhenChatResumes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w, rec := newFakeWorld(), &warmCalls{}
		w.threads["thread-stored"] = []string{"earlier"}
		s := warmSup(t, w, rec, func(c *Config) { c.Store = newTestStore("a", "thread-stored") })
		defer shutdown(t, s)
		synctest.Wait()
		spare := spareRows(s)[0]
		if r := mustSubmit(t, s, "a", "hi"); r.ThreadID != "thread-stored" || r.PID != spare.PID {
			t.Fatalf("reply %+v, want thread-stored resumed on the spare %d", r, spare.PID)
		}
		synctest.Wait() // the child went idle: its watcher deletes the thread
		if got := rec.list(); !slices.Contains(got, "delete "+spare.ThreadID) || slices.Contains(got, "name "+spare.ThreadID+" a") {
			t.Fatalf("calls %q: want the spare's thread deleted, not named", got)
		}
	})
}

// A warm-up that fails leaves the spare ready and handed out as usual; the failure is logged at
// warn level once, later ones at debug level.
func TestSpareWarmUpFailureLoggedOnceNeverBlocks(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		w, rec := newFakeWorld(), &warmCalls{fail: errors.New("canned model down")}
		s := warmSup(t, w, rec, func(c *Config) { c.Logger = zap.New(core) })
		defer shutdown(t, s)
		for _, key := range []string{"a", "b", "c"} {
			synctest.Wait()
			if len(spareRows(s)) != 1 {
				t.Fatalf("no spare ready before %s", key)
			}
			spare := spareRows(s)[0]
			if r := mustSubmit(t, s, key, "hi"); r.PID != spare.PID || r.Text != "reply #1: hi" {
				t.Fatalf("%s: %+v, want its first turn on the spare %d", key, r, spare.PID)
			}
		}
		warn, debug := 0, 0
		for _, e := range logs.FilterMessageSnippet("could not warm up").All() {
			switch e.Level {
			case zapcore.WarnLevel:
				warn++
			case zapcore.DebugLevel:
				debug++
			}
		}
		if warn != 1 || debug < 2 {
			t.Fatalf("warm-up failures logged %d times at warn, %d at debug; want 1 and at least 2", warn, debug)
		}
	})
}
