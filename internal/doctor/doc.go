// Package doctor holds the checks of `supervisor doctor`: what `supervisor run` would use
// (codex, its login, CODEX_HOME, the state directory, the listen address, the platform, the
// memory budget), one Result a check, each failing or warning one saying what to do.
//
// The checks repeat some of the daemon's start-up steps (finding codex, asking it for its
// login, deciding who owns the ChatGPT login, trying the child user's access); the binary that
// owns those steps gives them in Config.Steps, so a check runs the very step run would.
package doctor
