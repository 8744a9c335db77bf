// Package deploy holds no code: its tests check the packaging files beside it and at the
// repository root (systemd/supervisor.service, the Dockerfile, `make install`) with the tools that
// read them — systemd-analyze, the Dockerfile parser, make — and run the commands the
// Dockerfile's build stages run.
package deploy
