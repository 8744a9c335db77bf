package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// MaxRequestBytes bounds a request's body: the verbs take small documents, so a larger body is
// refused (413) before it is read.
const MaxRequestBytes = 1 << 20

// maxHeaderBytes bounds a request's header, which the verbs do not use.
const maxHeaderBytes = 64 << 10

// Error is a verb's refusal: the HTTP status it answers with and why. The answer's body is
// {"error": Msg}; a Client returns it as *Error.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// Refuse makes err a refusal with HTTP status: a verb's serve function returns it to answer
// with that status rather than 500.
func Refuse(status int, err error) error { return &Error{Status: status, Msg: err.Error()} }

// Server serves the verbs registered on it. The daemon registers its own; a verb is added by
// registering it, without a change to this package.
type Server struct {
	mux *http.ServeMux

	mu    sync.Mutex
	verbs []string
}

// NewServer returns a Server with no verbs.
func NewServer() *Server { return &Server{mux: http.NewServeMux()} }

// HandleHTTP registers verb ("GET /v1/healthz": a method and a path) served by h as it is, for
// the probes whose answer is their own.
func (s *Server) HandleHTTP(verb string, h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mux.Handle(verb, h)
	s.verbs = append(s.verbs, verb)
	slices.Sort(s.verbs)
}

// Handle registers verb on s: its request body, if any, is decoded into a Req (an empty body is
// Req's zero value; unknown fields are refused), serve's answer is encoded as JSON with status
// ok, and its error as {"error": …} with the status of an *Error, else 500.
func Handle[Req, Resp any](s *Server, verb string, ok int, serve func(context.Context, Req) (Resp, error)) {
	s.HandleHTTP(verb, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req Req
		body, err := io.ReadAll(r.Body)
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s: the request is larger than %d bytes", verb, MaxRequestBytes))
				return
			}
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: read the request: %v", verb, err))
			return
		}
		if len(bytes.TrimSpace(body)) > 0 {
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: bad request: %v", verb, err))
				return
			}
			if dec.More() {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: bad request: more than one JSON document", verb))
				return
			}
		}
		resp, err := serve(r.Context(), req)
		if err != nil {
			status := http.StatusInternalServerError
			var e *Error
			if errors.As(err, &e) {
				status = e.Status
			}
			writeError(w, status, err.Error())
			return
		}
		writeJSON(w, ok, resp)
	}))
}

// ServeHTTP answers a verb registered on s; any other gets 404 naming the verbs there are.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > MaxRequestBytes {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request is larger than %d bytes", MaxRequestBytes))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
	if _, pattern := s.mux.Handler(r); pattern == "" {
		s.mu.Lock()
		verbs := strings.Join(s.verbs, ", ")
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown verb %q; this daemon serves %s", r.Method+" "+r.URL.Path, verbs))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// HTTPServer returns an http.Server for s, logging to errorLog (nil: the standard logger).
func (s *Server) HTTPServer(errorLog *log.Logger) *http.Server {
	return &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: maxHeaderBytes, ErrorLog: errorLog}
}

// errorAnswer is the body of every refusal.
type errorAnswer struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorAnswer{Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
