// Package cannedmodel is the daemon's own stand-in for a model: a Responses API endpoint on
// loopback that answers every request at once with the same short, valid event stream and never
// reaches anything else. Spares run one throwaway turn against it (appserver.Client.WarmUp) so
// that codex pays the costs of a process's first turn before a chat needs it, without spending
// a model token or sending anything off the machine.
//
// codex must find it listening: pointed at a refused port, codex 0.169.0 keeps retrying and the
// turn never finishes.
package cannedmodel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// maxBody bounds what is read of one request: codex's first request carries its instructions
// and tools (about 40 KB); the rest is discarded unread.
const maxBody = 4 << 20

// Text is the assistant's answer in every canned stream.
const Text = "ok"

// Config configures a Server.
type Config struct {
	// Logger receives the server's own failures; nil means zap.NewNop().
	Logger *zap.Logger
}

// Server is a running canned responder on 127.0.0.1. It is safe for concurrent use.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	url  string
	log  *zap.Logger
	hits atomic.Int64
	done chan struct{} // closed when Serve returned
	once sync.Once
	err  error
}

// New listens on a free loopback port and starts answering.
func New(cfg Config) (*Server, error) {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("canned model: listen on loopback: %w", err)
	}
	s := &Server{ln: ln, log: log, done: make(chan struct{}), url: "http://" + ln.Addr().String() + "/v1"}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: zap.NewStdLog(log.Named("cannedmodel"))}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("canned model stopped serving; spares are handed out less warm", zap.Error(err))
		}
	}()
	return s, nil
}

// URL is the base URL of a codex model provider served by s ("http://127.0.0.1:<port>/v1").
func (s *Server) URL() string { return s.url }

// Requests is how many model requests s answered.
func (s *Server) Requests() int { return int(s.hits.Load()) }

// Close stops listening, ends the connections and waits for the server's goroutine.
func (s *Server) Close() error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			s.err = s.srv.Close()
		}
		<-s.done
	})
	return s.err
}

// serve answers POST …/responses with the canned stream and anything else with 404.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		http.NotFound(w, r)
		return
	}
	// The request is not looked at; reading it lets codex finish sending before the answer.
	if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, maxBody)); err != nil {
		return
	}
	s.hits.Add(1)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, stream)
}

// stream is the smallest answer codex 0.169.0 takes as a completed response: the response is
// created, one assistant message is done, and the response completes with its usage.
const stream = `event: response.created
data: {"type":"response.created","response":{"id":"resp_canned"}}

event: response.output_item.done
data: {"type":"response.output_item.done","item":{"type":"message","role":"assistant","id":"msg_canned","content":[{"type":"output_text","text":"` + Text + `"}]}}

event: response.completed
data: {"type":"response.completed","response":{"id":"resp_canned","usage":{"input_tokens":0,"input_tokens_details":null,"output_tokens":0,"output_tokens_details":null,"total_tokens":0}}}

`
