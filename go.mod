module github.com/molecule-ai/codex-warm

go 1.26.0

require (
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/coder/websocket v1.8.14
	github.com/coreos/go-systemd/v22 v22.7.0
	github.com/go-json-experiment/json v1.27.2
	github.com/prometheus/client_golang v1.25.0
	github.com/prometheus/client_model v0.6.3
	github.com/prometheus/common v0.72.0
	github.com/prometheus/procfs v0.23.0
	github.com/sourcegraph/jsonrpc2 v0.2.3
	go.uber.org/goleak v1.3.0
	go.uber.org/zap v1.28.0
	go.yaml.in/yaml/v3 v3.0.5
	golang.org/x/sys v0.49.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
