package daemon

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/zap"
)

// SSL_CERT_DIR goes only when SSL_CERT_FILE is a readable regular file in that very directory.
func TestLeanEnv(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "ca-certificates.crt")
	if err := os.WriteFile(bundle, []byte("certs"), 0o644); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "unreadable.crt")
	if err := os.WriteFile(unreadable, nil, 0o000); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	for _, tc := range []struct {
		name string
		env  []string
		drop bool
	}{
		{"bundle in the directory", []string{"A=1", "SSL_CERT_DIR=" + dir, "SSL_CERT_FILE=" + bundle}, true},
		{"directory with a trailing slash", []string{"SSL_CERT_DIR=" + dir + "/", "SSL_CERT_FILE=" + bundle}, true},
		{"no SSL_CERT_FILE", []string{"SSL_CERT_DIR=" + dir}, false},
		{"empty SSL_CERT_FILE", []string{"SSL_CERT_DIR=" + dir, "SSL_CERT_FILE="}, false},
		{"missing bundle", []string{"SSL_CERT_DIR=" + dir, "SSL_CERT_FILE=" + filepath.Join(dir, "gone.crt")}, false},
		{"bundle is a directory", []string{"SSL_CERT_DIR=" + filepath.Dir(dir), "SSL_CERT_FILE=" + dir}, false},
		{"bundle elsewhere: the directory may hold more", []string{"SSL_CERT_DIR=" + other, "SSL_CERT_FILE=" + bundle}, false},
		{"relative bundle", []string{"SSL_CERT_DIR=.", "SSL_CERT_FILE=ca-certificates.crt"}, false},
		{"no SSL_CERT_DIR", []string{"SSL_CERT_FILE=" + bundle}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, dropped := leanEnv(tc.env)
			if dropped != tc.drop {
				t.Fatalf("dropped = %v; want %v", dropped, tc.drop)
			}
			has := lookupEnv(got, "SSL_CERT_DIR") != ""
			if want := lookupEnv(tc.env, "SSL_CERT_DIR") != "" && !tc.drop; has != want {
				t.Fatalf("SSL_CERT_DIR kept = %v in %v; want %v", has, got, want)
			}
			if n := len(tc.env) - len(got); (tc.drop && n != 1) || (!tc.drop && n != 0) {
				t.Fatalf("env %v became %v", tc.env, got)
			}
		})
	}
	if os.Geteuid() != 0 {
		// root reads a mode-0 file; everyone else must keep the directory.
		if _, dropped := leanEnv([]string{"SSL_CERT_DIR=" + dir, "SSL_CERT_FILE=" + unreadable}); dropped {
			t.Error("SSL_CERT_DIR dropped for an unreadable bundle")
		}
	}
}

// A lean knob is set only where no config layer sets its key, and not at all when the layers
// could not be read.
func TestLeanOverrides(t *testing.T) {
	log := zap.NewNop()
	all := leanOverrides(map[string]json.RawMessage{"model": nil}, nil, log)
	if want := []string{"features.skill_search=false", "feedback.enabled=false"}; !slices.Equal(all, want) {
		t.Fatalf("nothing set: %v; want %v", all, want)
	}
	some := leanOverrides(map[string]json.RawMessage{"feedback.enabled": json.RawMessage(`{"name":{"type":"user"}}`)}, nil, log)
	if want := []string{"features.skill_search=false"}; !slices.Equal(some, want) {
		t.Fatalf("feedback.enabled set by the operator: %v; want %v", some, want)
	}
	if none := leanOverrides(nil, errors.New("no codex"), log); len(none) != 0 {
		t.Fatalf("config unreadable: %v; want none", none)
	}
}
