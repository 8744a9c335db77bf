package local

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// handingAnswerer tells every message ErrHandedOver until reloaded, as a supervisor frozen for
// a reload does; then it answers, recording the ids it was given.
type handingAnswerer struct {
	mu       sync.Mutex
	reloaded bool
	asked    chan string // text of each message handed over
	ids      []string
}

func (a *handingAnswerer) SubmitInput(_ context.Context, key string, in supervisor.Input) (supervisor.Reply, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.reloaded {
		a.asked <- in.Text
		return supervisor.Reply{}, errors.Join(errors.New("chat "+key), supervisor.ErrHandedOver)
	}
	a.ids = append(a.ids, in.MessageID)
	return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu", Status: "completed", Text: "answer to " + in.Text}, nil
}

// A plain message whose turn a reload hands over keeps its caller's connection: the handler
// takes it without answering, TakeWaiting returns it with the message (in arrival order), and
// ResumeWaiting gives each message again, with its id, and writes the answer on the connection.
// An event stream's message has no id: it is answered as before, not handed over.
func TestHandedOverCallersGetTheirAnswers(t *testing.T) {
	a := &handingAnswerer{asked: make(chan string, 3)}
	h, err := New(Config{Answerer: a})
	must(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	type result struct {
		status int
		reply  Reply
		err    error
	}
	post := func(text string, sse bool) <-chan result {
		out := make(chan result, 1)
		go func() {
			req, _ := http.NewRequest("POST", srv.URL+"/v1/chats/k/messages", strings.NewReader(`{"text":"`+text+`"}`))
			req.Header.Set("Content-Type", "application/json")
			if sse {
				req.Header.Set("Accept", "text/event-stream")
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				out <- result{err: err}
				return
			}
			defer resp.Body.Close()
			var r Reply
			if !sse {
				err = json.NewDecoder(resp.Body).Decode(&r)
			}
			out <- result{status: resp.StatusCode, reply: r, err: err}
		}()
		return out
	}
	first := post("one", false)
	if got := <-a.asked; got != "one" {
		t.Fatalf("asked %q", got)
	}
	second := post("two", false)
	<-a.asked
	stream := post("streamed", true)
	<-a.asked
	if r := <-stream; r.err != nil || r.status != http.StatusOK {
		t.Fatalf("event stream: %+v", r)
	}
	waiting, err := h.TakeWaiting(waitCtx(t))
	must(t, err)
	if len(waiting) != 2 || waiting[0].Text != "one" || waiting[1].Text != "two" || waiting[0].MessageID == "" ||
		waiting[0].MessageID == waiting[1].MessageID {
		t.Fatalf("waiting %+v", waiting)
	}
	a.mu.Lock()
	a.reloaded = true
	a.mu.Unlock()
	h.ResumeWaiting(waiting)
	for i, ch := range []<-chan result{first, second} {
		r := <-ch
		if r.err != nil || r.status != http.StatusOK || r.reply.Text != "answer to "+waiting[i].Text || r.reply.Status != "completed" {
			t.Fatalf("answer %d: %+v", i, r)
		}
	}
	h.Wait()
	if len(a.ids) != 2 || a.ids[0] != waiting[0].MessageID || a.ids[1] != waiting[1].MessageID {
		t.Fatalf("messages given again with ids %v, want %s then %s", a.ids, waiting[0].MessageID, waiting[1].MessageID)
	}
	if more, err := h.TakeWaiting(waitCtx(t)); err != nil || len(more) != 0 {
		t.Fatalf("after resuming: %d waiting, %v", len(more), err)
	}
}
