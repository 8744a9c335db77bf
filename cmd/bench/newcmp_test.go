package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/exectest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// flagValue returns the argument after flag in args, and whether flag occurs.
func flagValue(args []string, flag string) (string, bool) {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return "", i >= 0
	}
	return args[i+1], true
}

// TestDaemonArgs checks what `supervisor run` is started with: --spares only when the
// comparison asks for it (so a daemon without the flag still starts), and the Molecule inbox
// with the fake platform's environment replacing any the bench inherited.
func TestDaemonArgs(t *testing.T) {
	s := side{name: "x", dir: "/tmp/ws/01-x", codexHome: "/tmp/ws/01-x/codex-home", cwd: "/tmp/ws/01-x/cwd"}
	base := daemonConfig{SupervisorBin: "/abs/bin/supervisor", CodexBin: "/abs/codex", Side: s, MaxChildren: 7, Marker: "CODEX_WARM_BENCH_ROOT=/tmp/ws"}

	args := base.args()
	if _, ok := flagValue(args, "--spares"); ok {
		t.Errorf("no spares configured, yet the args carry --spares: %v", args)
	}
	for flag, want := range map[string]string{"--inbox": "local", "--listen": "127.0.0.1:0", "--max-children": "7",
		"--state-dir": "/tmp/ws/01-x/state", "--codex-bin": "/abs/codex"} {
		if got, _ := flagValue(args, flag); got != want {
			t.Errorf("%s = %q, want %q (args %v)", flag, got, want, args)
		}
	}
	if args[0] != "run" {
		t.Errorf("args start %q, want run", args[0])
	}

	for _, n := range []int{0, 2} {
		c := base
		c.Spares = ptr(n)
		if got, ok := flagValue(c.args(), "--spares"); !ok || got != fmt.Sprint(n) {
			t.Errorf("Spares %d: --spares = %q (present %v), want %d", n, got, ok, n)
		}
	}

	// The first-message comparison: both daemon sides pass --spares when the daemon has it, and
	// neither does when it has not.
	for _, supported := range []bool{true, false} {
		zero, spares, eff := firstMsgDaemons(3, supported)
		zc, sc := base, base
		zc.Spares, sc.Spares = zero, spares
		zv, zok := flagValue(zc.args(), "--spares")
		sv, sok := flagValue(sc.args(), "--spares")
		switch {
		case supported && (zv != "0" || sv != "3" || eff != 3):
			t.Errorf("supported: zero side --spares %q, spares side %q, effective %d; want 0, 3, 3", zv, sv, eff)
		case !supported && (zok || sok || eff != 0):
			t.Errorf("unsupported: --spares present on zero side %v, spares side %v, effective %d; want neither, 0", zok, sok, eff)
		}
	}

	plat := moleculetest.New(moleculetest.Config{WorkspaceID: "ws-bench"})
	defer plat.Close()
	m := base
	m.Platform = plat
	m.PollInterval = 100 * time.Millisecond
	margs := m.args()
	if got, _ := flagValue(margs, "--inbox"); got != "molecule" {
		t.Errorf("molecule --inbox = %q", got)
	}
	if got, _ := flagValue(margs, "--poll-interval"); got != "100ms" {
		t.Errorf("molecule --poll-interval = %q", got)
	}
	if _, ok := flagValue(margs, "--listen"); ok {
		t.Errorf("molecule daemon opens a local listener: %v", margs)
	}
	env := m.env([]string{"PATH=/bin", "PLATFORM_URL=https://real.example", "MOLECULE_ORG_ID=org", "CODEX_WARM_INBOX=local", "CODEX_HOME=/home/u/.codex"})
	lookup := func(k string) []string {
		var vs []string
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				vs = append(vs, v)
			}
		}
		return vs
	}
	for k, want := range map[string]string{"PLATFORM_URL": plat.URL(), "WORKSPACE_ID": "ws-bench",
		"MOLECULE_WORKSPACE_TOKEN": plat.Token(), "PATH": "/bin", "CONFIGS_DIR": "/tmp/ws/01-x/no-configs"} {
		if got := lookup(k); !slices.Equal(got, []string{want}) {
			t.Errorf("env %s = %q, want exactly %q", k, got, want)
		}
	}
	for _, k := range []string{"MOLECULE_ORG_ID", "CODEX_WARM_INBOX"} {
		if got := lookup(k); got != nil {
			t.Errorf("inherited %s=%q reached the daemon", k, got)
		}
	}
	// The side's CODEX_HOME is last, so it wins over an inherited one.
	if homes := lookup("CODEX_HOME"); homes[len(homes)-1] != s.codexHome {
		t.Errorf("CODEX_HOME entries %q: the side's must be last", homes)
	}
	if local := base.env([]string{"PLATFORM_URL=https://real.example"}); !slices.Contains(local, "PLATFORM_URL=https://real.example") {
		t.Error("the local-inbox daemon's environment lost an inherited variable it ignores anyway (--inbox local)")
	}
}

func TestUsageFlags(t *testing.T) {
	usage := "Usage of run:\n" +
		"  -approval string\n" +
		"    \tanswer to approvals: decline or accept (default \"decline\")\n" +
		"  -json\n" +
		"    \tprint JSON; see -spares below\n" +
		"  -spares int\n" +
		"    \tspare children (default 1)\n"
	got := usageFlags(usage)
	for _, f := range []string{"approval", "json", "spares"} {
		if !got[f] {
			t.Errorf("flag %s not found in %v", f, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("flags = %v, want exactly approval, json, spares", got)
	}
	if got := usageFlags("Usage of run:\n  -approval string\n"); got["spares"] {
		t.Error("spares found in a usage text without it")
	}
}

// TestRunFlags reads the flags of a stand-in daemon binary whose -h exits 2, as the flag package
// does.
func TestRunFlags(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "supervisor")
	script := "#!/bin/sh\n[ \"$1 $2\" = 'run -h' ] || exit 9\nprintf 'Usage of run:\\n  -spares int\\n    \\tspares\\n' >&2\nexit 2\n"
	if err := exectest.WriteExecutable(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	flags, err := runFlags(t.Context(), bin)
	if err != nil || !flags["spares"] {
		t.Errorf("runFlags = %v, %v; want spares", flags, err)
	}
	if _, err := runFlags(t.Context(), filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("runFlags of a missing binary succeeded")
	}
}

func TestCountSparesAndChats(t *testing.T) {
	snap := supervisor.Snapshot{Children: []supervisor.ChildStatus{
		{ChatKey: "a", PID: 10, State: supervisor.StateIdle},
		{ChatKey: "b", PID: 11, State: supervisor.StateBusy},
		{PID: 12, State: supervisor.StateSpare},
		{PID: 13, State: supervisor.StateSpare},
		{PID: 0, State: supervisor.StateSpare}, // not alive
		{ChatKey: "c", PID: 0, State: supervisor.StateDead},
	}}
	if got := countSpares(snap); got != 2 {
		t.Errorf("countSpares = %d, want 2", got)
	}
	if got := countChats(snap); got != 2 {
		t.Errorf("countChats = %d, want 2", got)
	}
}

func TestRotate(t *testing.T) {
	var order []string
	side := func(name string) func(int) error {
		return func(int) error { order = append(order, name); return nil }
	}
	if err := rotate(4, side("A"), side("B"), side("C")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ""); got != "ABCBCACABABC" {
		t.Errorf("order = %s, want ABC BCA CAB ABC", got)
	}
	calls := 0
	err := rotate(3, func(int) error { calls++; return nil }, func(int) error { calls++; return io.EOF }, func(int) error { calls++; return nil })
	if err != io.EOF || calls != 2 {
		t.Errorf("rotate after an error: err %v, %d calls; want EOF after 2", err, calls)
	}
}

func TestMoleculeLoadAndReplies(t *testing.T) {
	load := moleculeLoad(3, 2)
	if len(load) != 6 || load[0].peer != "bench-peer-0" || load[3].peer != "bench-peer-0" || load[3].index != 2 || load[2].index != 1 {
		t.Fatalf("load = %+v: want every chat's first message, then every chat's second", load)
	}
	answer := func(m molMsg) moleculetest.A2ASend {
		return moleculetest.A2ASend{Peer: m.peer, Text: fmt.Sprintf("reply #%d: %s", m.index, m.text)}
	}
	var good []moleculetest.A2ASend
	for _, m := range load {
		good = append(good, answer(m))
	}
	slices.Reverse(good) // arrival order does not matter
	if err := checkMoleculeReplies(good, load); err != nil {
		t.Errorf("all replies present: %v", err)
	}
	wrongPeer := slices.Clone(good)
	wrongPeer[0].Peer = "bench-peer-9"
	noHistory := slices.Clone(good)
	noHistory[0].Text = "reply #1: " + load[len(load)-1].text // the model saw one message, not two
	for name, sends := range map[string][]moleculetest.A2ASend{
		"missing":    good[1:],
		"duplicate":  append(slices.Clone(good[1:]), good[1]),
		"wrong peer": wrongPeer,
		"no history": noHistory,
		"stranger":   append(slices.Clone(good), moleculetest.A2ASend{Peer: "bench-peer-0", Text: "reply #1: something else"}),
		"error text": append(slices.Clone(good[1:]), moleculetest.A2ASend{Peer: "bench-peer-0", Text: "codex failed"}),
	} {
		if err := checkMoleculeReplies(sends, load); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestChatsPerGB(t *testing.T) {
	if got := chatsPerGB(1<<30, 4); got != 4 {
		t.Errorf("4 chats in 1 GB = %v chats/GB, want 4", got)
	}
	if got := chatsPerGB(256<<20, 8); got != 32 {
		t.Errorf("8 chats in 256 MB = %v chats/GB, want 32", got)
	}
	if !math.IsNaN(chatsPerGB(0, 8)) || !math.IsNaN(chatsPerGB(1<<30, 0)) {
		t.Error("chatsPerGB of nothing must be NaN")
	}
}

// TestTreeMemory reads the memory of this process and a child it started: the child counts,
// with a PSS no larger than its RSS.
func TestTreeMemory(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	m, err := treeMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RootRSS <= 0 || m.Procs < 1 || m.Children.RSS <= 0 || m.Children.PSS <= 0 || m.Children.PSS > m.Children.RSS || m.Children.USS > m.Children.PSS {
		t.Errorf("tree memory = %+v: want the sleep child counted, USS <= PSS <= RSS", m)
	}
	if _, err := treeMemory(-5); err == nil {
		t.Error("treeMemory of a missing pid succeeded")
	}
}

// TestMockWorkerPeak drives the mock subprocess's control protocol in process: "peak" answers
// the in-flight high-water mark and starts a new one.
func TestMockWorkerPeak(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- mockWorkerMain(nil, inR, outW, io.Discard)
		outW.Close()
	}()
	lines := bufio.NewReader(outR)
	read := func() string {
		t.Helper()
		l, err := lines.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(l)
	}
	url, ok := strings.CutPrefix(read(), "ready ")
	if !ok {
		t.Fatal("no ready line")
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Post(url+"/responses", "application/json", strings.NewReader(`{"input":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, want := range []string{"peak 1", "peak 0"} {
		if _, err := io.WriteString(inW, "peak\n"); err != nil {
			t.Fatal(err)
		}
		if got := read(); got != want {
			t.Errorf("answer %q, want %q", got, want)
		}
	}
	inW.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a hang guard
	defer cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("mock worker exited %d", code)
		}
	case <-ctx.Done():
		t.Fatal(errors.New("mock worker did not stop at stdin EOF"))
	}
}
