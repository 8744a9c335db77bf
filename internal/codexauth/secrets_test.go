package codexauth_test

import (
	"slices"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/codexauth/codexauthtest"
)

func TestLoginSecrets(t *testing.T) {
	doc := codexauthtest.AuthDoc("id-token-1111", "access-token-2222", "refresh-token-3333", "acct")
	got := codexauth.LoginSecrets(doc)
	slices.Sort(got)
	if want := []string{"access-token-2222", "id-token-1111", "refresh-token-3333"}; !slices.Equal(got, want) {
		t.Fatalf("LoginSecrets = %v, want %v", got, want)
	}
	if got := codexauth.LoginSecrets([]byte(`{"OPENAI_API_KEY":"sk-key-4444","tokens":null}`)); !slices.Equal(got, []string{"sk-key-4444"}) {
		t.Fatalf("an API-key login: %v", got)
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{"tokens":"x"}`} {
		if got := codexauth.LoginSecrets([]byte(bad)); len(got) != 0 {
			t.Errorf("LoginSecrets(%q) = %v", bad, got)
		}
	}
	dir := t.TempDir()
	if err := codexauthtest.WriteAuthFile(dir, "id-token-1111", "access-token-2222", "refresh-token-3333", "acct"); err != nil {
		t.Fatal(err)
	}
	if got := codexauth.Secrets(dir); len(got) != 3 {
		t.Fatalf("Secrets(auth.json) = %v", got)
	}
}
