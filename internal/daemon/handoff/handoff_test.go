package handoff

import (
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A document written by Write reads back the same through the descriptor EnvFD names, and the
// descriptor is close-on-exec until Inherit clears it.
func TestWriteReadRoundTrip(t *testing.T) {
	in := Doc{WrittenBy: "v1", Reloads: 2, Attempts: 3, Trigger: "SIGHUP", Executable: "/usr/bin/supervisor", LockFD: 7,
		Listeners: []Listener{{Name: ListenerInbox, FD: 8, Addr: "127.0.0.1:1"}},
		Children:  []Child{{ChatKey: "c", ThreadID: "t", PID: 42, Stdin: 9, Stdout: 10, Stderr: 11, Pending: []byte(`{"jsonrpc":`)}},
		Env:       map[string]string{"MOLECULE_WORKSPACE_TOKEN": "s"}}
	f, err := Write(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if cloexec, err := CloseOnExec(fd); err != nil || !cloexec {
		t.Fatalf("new handoff file: close-on-exec %v (%v), want set", cloexec, err)
	}
	if err := Inherit(fd); err != nil {
		t.Fatal(err)
	}
	if cloexec, _ := CloseOnExec(fd); cloexec {
		t.Fatal("Inherit left close-on-exec set")
	}
	// What the next image does: find it in the environment, which sets close-on-exec again.
	dup, err := syscall.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	g, ok, err := FromEnv(func(k string) string {
		if k == EnvFD {
			return strconv.Itoa(dup)
		}
		return ""
	})
	if err != nil || !ok {
		t.Fatalf("FromEnv: %v %v", ok, err)
	}
	defer g.Close()
	if cloexec, _ := CloseOnExec(dup); !cloexec {
		t.Fatal("FromEnv left close-on-exec clear")
	}
	out, err := Read(g)
	if err != nil {
		t.Fatal(err)
	}
	if out.Version != VersionUnshared || out.Children[0].PID != 42 || string(out.Children[0].Pending) != `{"jsonrpc":` ||
		out.Env["MOLECULE_WORKSPACE_TOKEN"] != "s" || out.Listeners[0].FD != 8 || out.Trigger != "SIGHUP" {
		t.Fatalf("read back %+v", out)
	}
	if got := out.FDs(); len(got) != 1+1+3 {
		t.Fatalf("FDs: %v", got)
	}
}

// A version this build does not read is refused with a *VersionError before anything else is
// decoded; so is a preflight answer of a binary that cannot read the version this one writes.
func TestVersionsRefusedCleanly(t *testing.T) {
	_, err := Read(strings.NewReader(`{"version":99,"children":"not even the right type"}`))
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Got != 99 {
		t.Fatalf("Read of version 99: %v", err)
	}
	if _, err := Read(strings.NewReader(`not json`)); err == nil {
		t.Fatal("Read of garbage succeeded")
	}
	if _, err := CheckPreflight([]byte(`{"program":"codex-warm","version":"v2","handoff_readable":[3,4]}`), VersionUnshared); !errors.As(err, &ve) {
		t.Fatalf("preflight of a binary reading [3 4]: %v", err)
	}
	// A binary that reads only version 1 would take a child handed over mid-turn for an idle
	// one: it is refused.
	if _, err := CheckPreflight([]byte(`{"program":"codex-warm","version":"v1","handoff_readable":[1]}`), VersionUnshared); !errors.As(err, &ve) {
		t.Fatalf("preflight of a binary reading [1]: %v", err)
	}
	// The previous version's document is still read: its children are idle.
	old, err := Read(strings.NewReader(`{"version":1,"children":[{"chat_key":"c","pid":7,"unknown_field":1}]}`))
	if err != nil || len(old.Children) != 1 || old.Children[0].Turn != nil || old.Children[0].PID != 7 {
		t.Fatalf("version 1 document: %+v %v", old, err)
	}
	if _, err := CheckPreflight([]byte(`{"program":"other","handoff_readable":[1]}`), VersionUnshared); err == nil {
		t.Fatal("preflight of another program accepted")
	}
	p, err := CheckPreflight([]byte(`{"program":"codex-warm","version":"v2","handoff_readable":[1,2]}`), VersionUnshared)
	if err != nil || p.Version != "v2" {
		t.Fatalf("good preflight: %+v %v", p, err)
	}
	// A binary that knows no shared children is refused by a daemon that shares them, and
	// taken by one that does not.
	if _, err := CheckPreflight([]byte(`{"program":"codex-warm","version":"v2","handoff_readable":[1,2]}`), Version); !errors.As(err, &ve) || ve.Got != Version {
		t.Fatalf("preflight of a binary reading [1 2] for shared children: %v", err)
	}
	if _, ok, _ := FromEnv(func(string) string { return "" }); ok {
		t.Fatal("FromEnv without the variable said ok")
	}
	if _, _, err := FromEnv(func(string) string { return "x" }); err == nil {
		t.Fatal("FromEnv accepted a non-number")
	}
}

// The handoff file has mode 0: its descriptor reads it, and nothing opens it again by name
// (what /proc/<pid>/fd/<n> does) without CAP_DAC_OVERRIDE.
func TestWriteFileHasNoMode(t *testing.T) {
	f, err := Write(Doc{Env: map[string]string{"MOLECULE_WORKSPACE_TOKEN": "s"}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0 {
		t.Fatalf("handoff file mode %v, want 0", st.Mode().Perm())
	}
	d, err := Read(f)
	if err != nil || d.Env["MOLECULE_WORKSPACE_TOKEN"] != "s" {
		t.Fatalf("read through the descriptor: %+v, %v", d, err)
	}
}

// A document is written as version 3 only when a child hosts several chats' threads, so that
// an image of a build without shared children still takes the others; the threads survive the
// round trip.
func TestSharedChildWritesVersion3(t *testing.T) {
	d := Doc{Children: []Child{{ChatKey: "a", ThreadID: "ta", PID: 7}}}
	if v := d.WriteVersion(); v != VersionUnshared {
		t.Fatalf("unshared document writes version %d, want %d", v, VersionUnshared)
	}
	d.Children[0].Threads = []Thread{{ChatKey: "b", ThreadID: "tb", Turns: 2}}
	f, err := Write(d)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != Version || len(got.Children) != 1 || len(got.Children[0].Threads) != 1 ||
		got.Children[0].Threads[0] != d.Children[0].Threads[0] {
		t.Fatalf("read back %+v, want version %d with the shared thread", got, Version)
	}
}
