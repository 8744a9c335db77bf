// Package appservertest holds test doubles and test helpers for code that drives codex: a fake
// app-server run from the test binary (RunFakeIfRequested, FakeCommand); CodexBin, which finds
// the real binary for end-to-end tests; and ExecTurn, the exec-per-message way of running codex
// that the daemon replaces, kept for comparisons. The mock model those tests point real codex at
// is package mockmodel. Production binaries must not import this package.
package appservertest
