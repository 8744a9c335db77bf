package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDelayProxy: bytes cross the proxy both ways, a round trip through it takes at least the
// round trip it adds, and a half close passes through.
func TestDelayProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c) // echo until the client's half close
		served <- err
	}()
	const rtt = 40 * time.Millisecond
	p, err := startDelayProxy(ln.Addr().String(), rtt)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("echo %q, %v", line, err)
	}
	if took := time.Since(start); took < rtt {
		t.Errorf("a round trip through the proxy took %s, want at least %s", took, rtt)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
		t.Errorf("after the half close: %q, %v; want EOF", rest, err)
	}
	if err := <-served; err != nil {
		t.Errorf("echo server: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// TestPathModelWSS: on the production path the mock serves TLS behind the proxy, and a client
// trusting the CA the path wrote reaches it through the proxy's address.
func TestPathModelWSS(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	pm, err := startPathModel(0, pathFor(pathWSS, 10*time.Millisecond), ca)
	if err != nil {
		t.Fatal(err)
	}
	defer pm.Close()
	if !strings.HasPrefix(pm.URL(), "https://"+pm.proxy.Addr()) {
		t.Fatalf("URL %s, want the proxy's %s over https", pm.URL(), pm.proxy.Addr())
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, pm.URL()+"/responses", strings.NewReader(`{"input":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "response.completed") {
		t.Errorf("through the proxy: %d %s", resp.StatusCode, body)
	}
	home := t.TempDir()
	if err := pm.WriteCodexHome(home); err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile(filepath.Join(home, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conf), pm.URL()) || !strings.Contains(string(conf), "supports_websockets = true") {
		t.Errorf("codex home does not point at the proxy on the websocket:\n%s", conf)
	}
}
