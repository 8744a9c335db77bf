package daemon

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseAge(t *testing.T) {
	day := 24 * time.Hour
	for in, want := range map[string]time.Duration{"30d": 30 * day, "1.5d": 36 * time.Hour, "720h": 30 * day,
		"90m": 90 * time.Minute, "off": 0, "0": 0, "": 0, " 7d ": 7 * day} {
		if got, err := ParseAge(in); err != nil || got != want {
			t.Errorf("ParseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"-1d", "-5h", "d", "30days", "thirty", "1y"} {
		if _, err := ParseAge(in); err == nil {
			t.Errorf("ParseAge(%q) accepted", in)
		}
	}
}

// The retention flags take days from the command line and the environment, the flag winning;
// a bad value is an error naming it.
func TestRetentionFlags(t *testing.T) {
	c, err := parseRunConfig([]string{"--archive-idle-after", "30d", "--uploads-max-age", "12h"},
		envOf(map[string]string{"CODEX_WARM_ARCHIVE_IDLE_AFTER": "5d", "CODEX_WARM_DELETE_ARCHIVED_AFTER": "90d"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.ArchiveIdleAfter != 30*24*time.Hour || c.DeleteArchivedAfter != 90*24*time.Hour || c.UploadsMaxAge != 12*time.Hour ||
		c.ArchiveSweepEvery != time.Hour {
		t.Fatalf("config %v %v %v %v", c.ArchiveIdleAfter, c.DeleteArchivedAfter, c.UploadsMaxAge, c.ArchiveSweepEvery)
	}
	if d, _ := parseRunConfig(nil, envOf(nil), io.Discard); d.ArchiveIdleAfter != 0 || d.DeleteArchivedAfter != 0 || d.UploadsMaxAge != 0 {
		t.Fatal("retention is on by default")
	}
	if _, err := parseRunConfig(nil, envOf(map[string]string{"CODEX_WARM_DELETE_ARCHIVED_AFTER": "soon"}), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "CODEX_WARM_DELETE_ARCHIVED_AFTER") {
		t.Fatalf("bad env value: %v", err)
	}
	if _, err := parseRunConfig([]string{"--archive-idle-after", "-3d"}, envOf(nil), io.Discard); err == nil {
		t.Fatal("a negative age was accepted")
	}
}
