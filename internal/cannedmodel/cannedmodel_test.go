package cannedmodel_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/molecule-ai/codex-warm/internal/cannedmodel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The responder answers a Responses request with a stream of three events, in order, each a
// JSON object of its type, the message carrying Text; it counts the request. Anything else is
// 404 and not counted. It listens on loopback only.
func TestCannedStream(t *testing.T) {
	s, err := cannedmodel.New(cannedmodel.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") || !strings.HasSuffix(s.URL(), "/v1") {
		t.Fatalf("URL %q: want http://127.0.0.1:<port>/v1", s.URL())
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	resp, err := client.Post(s.URL()+"/responses", "application/json", strings.NewReader(`{"input":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("HTTP %d %q; want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var events []string
	text := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type string `json:"type"`
			Item struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"item"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		events = append(events, ev.Type)
		if len(ev.Item.Content) == 1 {
			text = ev.Item.Content[0].Text
		}
	}
	want := []string{"response.created", "response.output_item.done", "response.completed"}
	if strings.Join(events, ",") != strings.Join(want, ",") || text != cannedmodel.Text {
		t.Fatalf("events %v text %q; want %v and %q", events, text, want, cannedmodel.Text)
	}

	other, err := client.Get(s.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	other.Body.Close()
	if other.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /models: HTTP %d; want 404", other.StatusCode)
	}
	if n := s.Requests(); n != 1 {
		t.Fatalf("Requests() = %d; want 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := client.Post(s.URL()+"/responses", "application/json", strings.NewReader(`{}`)); err == nil {
		t.Fatal("a closed responder still answers")
	}
}
