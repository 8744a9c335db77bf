package daemon

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/internal/atomicfile"
	"github.com/molecule-ai/codex-warm/internal/atomicfile/atomicfiletest"
	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// codex runs model-written commands: nothing that leads to a secret reaches it, neither the
// tokens nor CONFIGS_DIR (the directory holding the workspace token file) nor
// MOLECULE_WORKSPACE_TOKEN_FILE (the file itself).
func TestChildEnvDropsPlatformToken(t *testing.T) {
	t.Parallel()
	in := []string{"HOME=/home/u", "MOLECULE_WORKSPACE_TOKEN=s3cret", "CODEX_HOME=/c", "CONFIGS_DIR=/configs",
		"CODEX_WARM_INBOX_TOKEN=t0k", "PATH=/bin", "MOLECULE_WORKSPACE_TOKEN_FILE=x"}
	got := childEnv(in)
	want := []string{"HOME=/home/u", "CODEX_HOME=/c", "PATH=/bin"}
	if !slices.Equal(got, want) {
		t.Fatalf("childEnv = %q, want %q", got, want)
	}
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseRunConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c Config)
		wantErr string
	}{
		{
			name: "defaults pick the python daemon's state dir and the local inbox",
			env:  map[string]string{"HOME": "/home/u"},
			check: func(t *testing.T, c Config) {
				if c.StateDir != "/home/u/.codex-channel-molecule" || c.Inbox != "local" || c.TurnTimeout != 600*time.Second ||
					c.PostToolTimeout != 90*time.Second || c.Approval != "decline" || c.LogFormat != "json" {
					t.Fatalf("defaults: %+v", c)
				}
			},
		},
		{
			name: "PLATFORM_URL selects molecule; env fallbacks apply",
			env: map[string]string{"PLATFORM_URL": "http://p", "CODEX_CHANNEL_MOLECULE_STATE_DIR": "/s",
				"CODEX_WARM_MAX_CHILDREN": "5", "CODEX_WARM_TURN_TIMEOUT": "2m", "CODEX_BIN": "/x/codex"},
			check: func(t *testing.T, c Config) {
				if c.Inbox != "molecule" || c.StateDir != "/s" || c.MaxChildren != 5 || c.TurnTimeout != 2*time.Minute || c.CodexBin != "/x/codex" {
					t.Fatalf("env: %+v", c)
				}
			},
		},
		{
			name: "flags beat the environment",
			args: []string{"--inbox", "local", "--max-children", "3", "--codex-config", "a=1", "--codex-config", "b=2"},
			env:  map[string]string{"PLATFORM_URL": "http://p", "CODEX_WARM_MAX_CHILDREN": "5"},
			check: func(t *testing.T, c Config) {
				if c.Inbox != "local" || c.MaxChildren != 3 || !slices.Equal(c.CodexConfig, []string{"a=1", "b=2"}) {
					t.Fatalf("flags: %+v", c)
				}
			},
		},
		{
			name: "memory defaults: supervisor's budget, 2 GiB child limit, no max age or turns",
			check: func(t *testing.T, c Config) {
				if c.MemoryBudget != 0 || c.MemoryBudgetFraction != 0 || c.ChildMemoryLimit != supervisor.DefaultChildMemoryLimit ||
					c.ChildMaxAge != 0 || c.ChildMaxTurns != 0 || c.MaxChildren != supervisor.DefaultMaxChildren {
					t.Fatalf("memory defaults: %+v", c)
				}
			},
		},
		{
			name: "memory budget as a size, recycling flags",
			args: []string{"--memory-budget", "2GiB", "--child-memory-limit", "500MB", "--child-max-age", "6h", "--child-max-turns", "100"},
			check: func(t *testing.T, c Config) {
				if c.MemoryBudget != 2<<30 || c.MemoryBudgetFraction != 0 || c.ChildMemoryLimit != 500e6 ||
					c.ChildMaxAge != 6*time.Hour || c.ChildMaxTurns != 100 {
					t.Fatalf("memory flags: %+v", c)
				}
			},
		},
		{
			name: "memory budget as a fraction from the environment; limit off",
			env:  map[string]string{"CODEX_WARM_MEMORY_BUDGET": "0.6", "CODEX_WARM_CHILD_MEMORY_LIMIT": "off"},
			check: func(t *testing.T, c Config) {
				if c.MemoryBudget != 0 || c.MemoryBudgetFraction != 0.6 || c.ChildMemoryLimit != 0 {
					t.Fatalf("memory env: %+v", c)
				}
			},
		},
		{
			name: "memory budget off",
			args: []string{"--memory-budget", "off"},
			check: func(t *testing.T, c Config) {
				if c.MemoryBudget != -1 {
					t.Fatalf("budget off: %+v", c)
				}
			},
		},
		{
			name: "busy policy: queue by default, steer from the environment, interrupt from the flag",
			env:  map[string]string{"CODEX_WARM_BUSY": "steer"},
			check: func(t *testing.T, c Config) {
				if c.Busy != supervisor.BusySteer {
					t.Fatalf("busy %q, want steer", c.Busy)
				}
				if d, _ := parseRunConfig(nil, envOf(nil), io.Discard); d.Busy != supervisor.BusyQueue {
					t.Fatalf("default busy %q, want queue", d.Busy)
				}
				if f, _ := parseRunConfig([]string{"--busy", "interrupt"}, envOf(map[string]string{"CODEX_WARM_BUSY": "steer"}), io.Discard); f.Busy != supervisor.BusyInterrupt {
					t.Fatalf("flag busy %q, want interrupt", f.Busy)
				}
			},
		},
		{name: "unknown busy policy", args: []string{"--busy", "merge"}, wantErr: "--busy"},
		{name: "negative progress interval", env: map[string]string{"CODEX_WARM_PROGRESS_INTERVAL": "-1m"}, wantErr: "--progress-interval"},
		{name: "memory budget of zero", args: []string{"--memory-budget", "0"}, wantErr: "--memory-budget"},
		{name: "an int in the environment that is not one", env: map[string]string{"CODEX_WARM_MAX_CHILDREN": "many"}, wantErr: `env CODEX_WARM_MAX_CHILDREN="many"`},
		{name: "a bool in the environment that is not one", env: map[string]string{"CODEX_WARM_WARM_SPARES": "maybe"}, wantErr: `env CODEX_WARM_WARM_SPARES="maybe"`},
		{name: "a duration in the environment that is not one", env: map[string]string{"CODEX_WARM_SLOT_WAIT": "30"}, wantErr: `env CODEX_WARM_SLOT_WAIT="30"`},
		{
			name: "typed defaults from the environment; a flag still wins",
			args: []string{"--max-slot-waiters", "7"},
			env: map[string]string{"CODEX_WARM_MAX_CHILDREN": "5", "CODEX_WARM_WARM_SPARES": "false", "CODEX_WARM_SLOT_WAIT": "2m",
				"CODEX_WARM_MAX_SLOT_WAITERS": "9"},
			check: func(t *testing.T, c Config) {
				if c.MaxChildren != 5 || c.WarmSpares || c.SlotWait != 2*time.Minute || c.MaxSlotWaiters != 7 {
					t.Fatalf("env defaults: max children %d, warm spares %v, slot wait %s, slot waiters %d",
						c.MaxChildren, c.WarmSpares, c.SlotWait, c.MaxSlotWaiters)
				}
			},
		},
		{name: "memory budget with a bad unit", args: []string{"--memory-budget", "2 parsecs"}, wantErr: "unknown unit"},
		{name: "child memory limit not a size", env: map[string]string{"CODEX_WARM_CHILD_MEMORY_LIMIT": "lots"}, wantErr: "--child-memory-limit"},
		{name: "negative max turns", args: []string{"--child-max-turns", "-1"}, wantErr: "--child-max-turns"},
		{name: "negative max age", args: []string{"--child-max-age", "-1h"}, wantErr: "--child-max-age"},
		{name: "bad duration in env is an error, not ignored", env: map[string]string{"CODEX_WARM_IDLE_TTL": "soon"}, wantErr: "CODEX_WARM_IDLE_TTL"},
		{name: "bad int in env", env: map[string]string{"CODEX_WARM_MAX_CHILDREN": "many"}, wantErr: "CODEX_WARM_MAX_CHILDREN"},
		{name: "unknown inbox", args: []string{"--inbox", "smtp"}, wantErr: "--inbox"},
		{name: "unknown approval", args: []string{"--approval", "yolo"}, wantErr: "--approval"},
		{name: "ask without chat commands", args: []string{"--approval", "ask", "--chat-commands=false"}, wantErr: "needs --chat-commands"},
		{name: "zero approval timeout", args: []string{"--approval", "ask", "--approval-timeout", "0s"}, wantErr: "--approval-timeout"},
		{name: "zero turn timeout", args: []string{"--turn-timeout", "0s"}, wantErr: "--turn-timeout"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "listen on every interface without a token", args: []string{"--listen", ":0"}, wantErr: "every interface"},
		{name: "listen on a public address without a token", args: []string{"--listen", "0.0.0.0:8377"}, wantErr: "without a token"},
		{name: "listen on a host name without a token", args: []string{"--listen", "inbox.internal:8377"}, wantErr: "without a token"},
		{name: "token from both flag and file", args: []string{"--inbox-token", "a", "--inbox-token-file", "/nope"}, wantErr: "either"},
		{name: "missing token file", args: []string{"--inbox-token-file", "/nonexistent/token"}, wantErr: "/nonexistent/token"},
		{
			name: "a token allows a listener beyond loopback, and its host is accepted",
			args: []string{"--listen", "10.1.2.3:8377"},
			env:  map[string]string{"CODEX_WARM_INBOX_TOKEN": "t0k"},
			check: func(t *testing.T, c Config) {
				if c.InboxToken != "t0k" || !slices.Equal(c.InboxAllowHosts, []string{"10.1.2.3"}) {
					t.Fatalf("token config: %+v", c)
				}
			},
		},
		{
			name: "the molecule inbox does not listen, so --listen is not checked",
			args: []string{"--inbox", "molecule", "--listen", ":0"},
			check: func(t *testing.T, c Config) {
				if c.Inbox != "molecule" {
					t.Fatalf("inbox %q", c.Inbox)
				}
			},
		},
		{
			name: "loopback defaults and inbox limits",
			args: []string{"--inbox-allow-origin", "https://a.example", "--inbox-allow-origin", "https://b.example"},
			check: func(t *testing.T, c Config) {
				if c.Listen != "127.0.0.1:8377" || c.InboxToken != "" || len(c.InboxAllowHosts) != 0 ||
					!slices.Equal(c.InboxAllowOrigins, []string{"https://a.example", "https://b.example"}) ||
					c.InboxMaxConns != 128 || c.InboxBodyTimeout != 15*time.Second ||
					c.SlotWait != 30*time.Second || c.MaxSlotWaiters != 64 {
					t.Fatalf("inbox defaults: %+v", c)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseRunConfig(tt.args, envOf(tt.env), io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestInboxTokenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("  t0k-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseRunConfig([]string{"--listen", "0.0.0.0:0"}, envOf(map[string]string{"CODEX_WARM_INBOX_TOKEN_FILE": path}), io.Discard)
	if err != nil || c.InboxToken != "t0k-from-file" {
		t.Fatalf("token from file: %q, %v", c.InboxToken, err)
	}
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := parseRunConfig([]string{"--inbox-token-file", path}, envOf(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty token file: %v", err)
	}
}

func TestParseBytes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"1073741824": 1 << 30, "2GiB": 2 << 30, "2gib": 2 << 30, "2Gi": 2 << 30, "2G": 2 << 30, "2GB": 2e9,
		"500MB": 500e6, "500 MiB": 500 << 20, "512m": 512 << 20, "1.5GiB": 3 << 29, "64KiB": 64 << 10, "1TB": 1e12, "0": 0,
	} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1GiB", "2XB", "1.2.3MB", "99999999TiB"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseRunConfigBadFlagIsUsageError(t *testing.T) {
	t.Parallel()
	_, err := parseRunConfig([]string{"--no-such-flag"}, envOf(nil), io.Discard)
	var ec ExitCode
	if !errors.As(err, &ec) || ec != 2 {
		t.Fatalf("err = %v, want exit code 2", err)
	}
}

// A second daemon on the same state dir is refused while the first holds the lock, and the lock
// is free again once the first lets go (the kernel also drops it when a process dies).
func TestStateDirLockIsExclusive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if second, err := lockStateDir(dir); err == nil {
		second.Close()
		t.Fatal("a second lock on the same state dir succeeded")
	} else if !strings.Contains(err.Error(), "another supervisor is running") {
		t.Fatalf("second lock: %v, want it to say another supervisor is running", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := lockStateDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.Close()
}

// A symbolic link at the lock file's path is refused with an error naming it; the file it points
// at is not truncated (the lock file gets the daemon's pid written into it).
func TestStateDirLockRefusesSymlink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, lockFileName)
	v := atomicfiletest.PlantSymlink(t, path, nil)
	l, err := lockStateDir(dir)
	if err == nil {
		l.Close()
	}
	if !errors.Is(err, atomicfile.ErrSymlink) || !strings.Contains(err.Error(), path) {
		t.Fatalf("lockStateDir = %v, want an error naming %s as a symbolic link", err, path)
	}
	v.AssertUntouched(t)
}

// While codex is not logged in the gate refuses with an *appserver.AuthError and asks codex again
// only once the answer is older than the recheck interval; after a login it admits.
func TestLoginGateRechecks(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var probes int
		loggedIn := false
		g := newLoginGate(func(context.Context) control.CodexAuth {
			probes++
			if loggedIn {
				return control.CodexAuth{State: control.CodexLoggedIn, Checked: time.Now()}
			}
			return control.CodexAuth{State: control.CodexNotLoggedIn, Detail: "no account", Checked: time.Now()}
		}, 5*time.Second)
		ctx := context.Background()
		g.check(ctx)
		var ae *appserver.AuthError
		if err := g.admit(ctx, "a"); !errors.As(err, &ae) || probes != 1 {
			t.Fatalf("admit = %v after %d probes, want an AuthError without a new probe", err, probes)
		}
		loggedIn = true
		time.Sleep(4 * time.Second)
		if err := g.admit(ctx, "a"); !errors.As(err, &ae) || probes != 1 {
			t.Fatalf("admit within the interval = %v after %d probes, want the stale refusal", err, probes)
		}
		time.Sleep(time.Second)
		if err := g.admit(ctx, "a"); err != nil || probes != 2 || g.current().State != control.CodexLoggedIn {
			t.Fatalf("admit after the interval = %v after %d probes (state %+v), want a new probe that admits", err, probes, g.current())
		}
		if err := g.admit(ctx, "a"); err != nil || probes != 2 {
			t.Fatalf("admit once logged in = %v after %d probes, want no more probes", err, probes)
		}
	})
}

// --metrics-listen follows the inbox's address rules with a token of its own: beyond loopback
// it needs CODEX_WARM_METRICS_TOKEN (the inbox token does not do), and its host is then accepted
// in Host headers. Off by default; the token is kept out of codex children.
func TestMetricsListenConfig(t *testing.T) {
	t.Parallel()
	c, err := parseRunConfig(nil, envOf(nil), io.Discard)
	if err != nil || c.MetricsListen != "" {
		t.Fatalf("default: %q %v, want off", c.MetricsListen, err)
	}
	_, err = parseRunConfig([]string{"--metrics-listen", "0.0.0.0:9477"}, envOf(map[string]string{"CODEX_WARM_INBOX_TOKEN": "inbox"}), io.Discard)
	if !errors.Is(err, local.ErrExposedWithoutToken) || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Errorf("every interface without a metrics token: %v, want ErrExposedWithoutToken naming --metrics-listen", err)
	}
	c, err = parseRunConfig(nil, envOf(map[string]string{"CODEX_WARM_METRICS_LISTEN": "10.1.2.3:9477", "CODEX_WARM_METRICS_TOKEN": " t0k "}), io.Discard)
	if err != nil || c.MetricsListen != "10.1.2.3:9477" || c.MetricsToken != "t0k" || !slices.Equal(c.MetricsAllowHosts, []string{"10.1.2.3"}) {
		t.Errorf("from the environment with a token: %+v %v", c, err)
	}
	if !slices.Contains(secretEnv(), "CODEX_WARM_METRICS_TOKEN") {
		t.Error("the metrics token would reach codex children")
	}
}
