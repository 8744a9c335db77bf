package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// Network paths the comparisons run on.
const (
	// pathWSS is the transport production uses: codex on a websocket over TLS to the model,
	// through a proxy that adds --rtt of round trip.
	pathWSS = "wss"
	// pathHTTP is the mock's plain transport: HTTP + SSE on loopback, no TLS, no added delay.
	pathHTTP = "http"
)

// allPaths lists the network paths, the production one first.
func allPaths() []string { return []string{pathWSS, pathHTTP} }

// netPath says how codex reaches the mock model in a comparison.
type netPath struct {
	Name string
	// HTTPOnly keeps codex on HTTP + SSE (no websocket).
	HTTPOnly bool
	// TLS serves the model over TLS with a CA the mock generates, written to the file codex's
	// SSL_CERT_FILE names.
	TLS bool
	// RTT is the round trip a proxy between codex and the model adds (0: no proxy).
	RTT time.Duration
}

// pathFor returns the named path with the configured round trip.
func pathFor(name string, rtt time.Duration) netPath {
	if name == pathHTTP {
		return netPath{Name: pathHTTP, HTTPOnly: true}
	}
	return netPath{Name: pathWSS, TLS: true, RTT: rtt}
}

// describe is the path as the report names it.
func (p netPath) describe() string {
	if p.HTTPOnly {
		return "HTTP + SSE on loopback"
	}
	return fmt.Sprintf("websocket + TLS + %s round trip", p.RTT)
}

// delayProxy is a TCP proxy on loopback that delays every byte by half the round trip in each
// direction: a long link of unlimited bandwidth. It passes TLS through untouched, so codex
// and the model handshake end to end, paying the round trips a real link would.
type delayProxy struct {
	ln     net.Listener
	target string
	oneWay time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // the accept loop and every connection's pumps
}

// startDelayProxy listens on 127.0.0.1 and forwards to target with rtt added.
func startDelayProxy(target string, rtt time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("delay proxy: %w", err)
	}
	p := &delayProxy{ln: ln, target: target, oneWay: rtt / 2, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

func (p *delayProxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !p.track(in, out) {
			return
		}
		p.wg.Go(func() {
			var pumps sync.WaitGroup
			pumps.Go(func() { p.pump(out, in) })
			pumps.Go(func() { p.pump(in, out) })
			pumps.Wait()
			p.mu.Lock()
			delete(p.conns, in)
			delete(p.conns, out)
			p.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
		})
	}
}

// track registers a connection pair, or closes it when the proxy is closing.
func (p *delayProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// chunk is bytes read from one side, due on the other at due.
type chunk struct {
	data []byte
	due  time.Time
}

// pump copies src to dst, each chunk oneWay after it was read. Reading goes on while earlier
// chunks wait, so the delay adds to the latency and not to the time a long transfer takes.
func (p *delayProxy) pump(dst, src net.Conn) {
	queue := make(chan chunk, 1024)
	var writer sync.WaitGroup
	writer.Go(func() {
		failed := false
		for c := range queue {
			if failed {
				continue // drain, so the reader never blocks on a dead writer
			}
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.data); err != nil {
				failed = true
				_ = src.Close()
			}
		}
		// src ended: pass the end on, as a half close where the socket allows it.
		if tc, ok := dst.(*net.TCPConn); ok && !failed {
			_ = tc.CloseWrite()
		} else {
			_ = dst.Close()
		}
	})
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			queue <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.oneWay)}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = dst.Close()
			}
			break
		}
	}
	close(queue)
	writer.Wait()
}

// Close stops accepting, closes every connection and returns once every pump has returned.
func (p *delayProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// pathModel is a mock model served on a network path: over TLS when the path says so, and
// behind a delayProxy when the path adds a round trip.
type pathModel struct {
	*mockmodel.Model
	proxy *delayProxy // nil without a round trip
}

// startPathModel starts a mock model with latency per response on path p. With TLS it writes
// the mock's CA to caFile, which the codex processes' SSL_CERT_FILE names.
func startPathModel(latency time.Duration, p netPath, caFile string) (*pathModel, error) {
	m, err := mockmodel.New(mockmodel.Config{Latency: latency, TLS: p.TLS, HTTPOnly: p.HTTPOnly})
	if err != nil {
		return nil, fmt.Errorf("mock model: %w", err)
	}
	pm := &pathModel{Model: m}
	if p.TLS {
		if err := m.WriteCA(caFile); err != nil {
			return nil, errors.Join(err, m.Close())
		}
	}
	if p.RTT > 0 {
		u, err := url.Parse(m.URL())
		if err == nil {
			pm.proxy, err = startDelayProxy(u.Host, p.RTT)
		}
		if err != nil {
			return nil, errors.Join(err, m.Close())
		}
	}
	return pm, nil
}

// Steps is the mock's timeline (model.Steps).
func (pm *pathModel) Steps() ([]mockmodel.Event, error) { return pm.Timeline(), nil }

// URL is the base URL codex is given: the proxy's when there is one.
func (pm *pathModel) URL() string {
	if pm.proxy == nil {
		return pm.Model.URL()
	}
	u, err := url.Parse(pm.Model.URL())
	if err != nil {
		return pm.Model.URL()
	}
	u.Host = pm.proxy.Addr()
	return u.String()
}

// WriteCodexHome points a CODEX_HOME at the model through the path.
func (pm *pathModel) WriteCodexHome(dir string) error {
	if pm.proxy == nil {
		return pm.Model.WriteCodexHome(dir)
	}
	return pm.WriteCodexHomeVia(dir, pm.proxy.Addr())
}

// TakeMaxInFlight implements model.
func (pm *pathModel) TakeMaxInFlight() (int, error) { return pm.ResetMaxInFlight(), nil }

// Close stops the proxy, then the model.
func (pm *pathModel) Close() error {
	var err error
	if pm.proxy != nil {
		err = pm.proxy.Close()
	}
	return errors.Join(err, pm.Model.Close())
}
