// Package demo is `supervisor demo`: the whole pipeline offline, a mock model on loopback and
// the daemon as a real child process on the local inbox with the real codex binary, a few chats,
// the status table and a clean stop; and what `supervisor mock-model` tells a newcomer.
package demo
