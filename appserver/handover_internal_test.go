package appserver

import (
	"context"
	"os"
	"testing"
	"time"
)

// A pause holds the reader at a message boundary: a line split across the pause is neither
// lost nor read twice. What was read of it is Pending, and a reader built over Pending and the
// same pipe (the next image) reads the whole message; so does the same reader once resumed.
func TestLineStreamPauseKeepsPartialLine(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	s := newLineStream(r, w, 1<<20, time.Second)
	got := make(chan string, 4)
	go func() {
		for {
			var v map[string]any
			if err := s.ReadObject(&v); err != nil {
				close(got)
				return
			}
			got <- v["m"].(string)
		}
	}()
	if _, err := w.WriteString(`{"m":"one"}` + "\n" + `{"m":"tw`); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m != "one" {
		t.Fatalf("first message %q", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pending, err := s.pause(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(pending) != `{"m":"tw` {
		t.Fatalf("pending %q, want the start of the second line", pending)
	}
	if _, err := w.WriteString(`o"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		t.Fatalf("read %q while paused", m)
	default:
	}
	s.resume()
	if m := <-got; m != "two" {
		t.Fatalf("after resume: %q", m)
	}
}
