package supervisor

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/molecule-ai/codex-warm/appserver/appservertest"
)

func TestMain(m *testing.M) {
	// The fake app-server is this test binary re-executed: serve it and exit when asked.
	appservertest.RunFakeIfRequested()
	goleak.VerifyTestMain(m)
}
