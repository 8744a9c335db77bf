// Package harness runs the supervisor daemon as a real process for the project's experiment
// commands (cmd/bench, cmd/soak): it starts `supervisor run` with a state directory and stops or
// kills it, reads its status the way an operator does (`supervisor status --json`), starts a
// mock model with a CODEX_HOME pointing at it, and wires a fake Molecule platform into the
// daemon's environment. Each command keeps only its experiment; how the daemon is driven is
// here once. It imports test doubles (inbox/molecule/moleculetest), so only tools link it, never the
// supervisor binary.
package harness
