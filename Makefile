# All set-up lives here so a fresh clone needs only `make demo` or `make test`.
# The pinned codex npm package is installed into .tools/ (ignored by git); the tests and the demo
# run its native binary, never the node wrapper.

CODEX_VERSION ?= 0.169.0
TOOLS         := $(CURDIR)/.tools
CODEX_STAMP   := $(TOOLS)/codex-$(CODEX_VERSION).stamp
GO            ?= go
GOFLAGS_TEST  ?= -race -count=1 -timeout 30m
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2

# The native binary's folder depends on the CPU; npm installs the matching optional package.
CODEX_ARCH := $(shell uname -m | sed -e 's/^x86_64$$/x64/' -e 's/^aarch64$$/arm64/')
CODEX_TRIPLE := $(shell uname -m)-unknown-linux-musl
CODEX_BIN  := $(TOOLS)/node_modules/@openai/codex-linux-$(CODEX_ARCH)/vendor/$(CODEX_TRIPLE)/bin/codex

export CODEX_BIN

.PHONY: all build codex codex-bin npm test vet lint demo bench soak soak-ci clean

all: build

# VERSION stamps `supervisor version` and the status header with the commit built.
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/supervisor ./cmd/supervisor

# codex installs the pinned @openai/codex package once; the stamp makes later runs a no-op.
codex: $(CODEX_STAMP)

$(CODEX_STAMP):
	@command -v npm >/dev/null || $(MAKE) --no-print-directory npm
	mkdir -p $(TOOLS)
	npm install --prefix $(TOOLS) --no-audit --no-fund --loglevel=error @openai/codex@$(CODEX_VERSION)
	@test -x $(CODEX_BIN) || { echo "native codex binary not found at $(CODEX_BIN)" >&2; exit 1; }
	$(CODEX_BIN) --version
	touch $@

# codex-bin prints the native binary's path, for running one package's tests by hand.
codex-bin:
	@echo $(CODEX_BIN)

# npm comes from Debian's packages when the machine lacks it (root can install; others are told how).
npm:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; \
	else \
		echo "npm is required to install @openai/codex; on Debian: sudo apt-get install -y nodejs npm" >&2; exit 1; \
	fi

vet:
	$(GO) vet ./...

lint:
	$(GO) run $(STATICCHECK) ./...

# test is what CI runs. CODEX_WARM_REQUIRE_CODEX turns "codex missing" into a failure instead of
# a skip, so the end-to-end tests can never be skipped here.
test: codex vet lint
	CODEX_WARM_REQUIRE_CODEX=1 $(GO) test $(GOFLAGS_TEST) ./...

demo: codex build
	./bin/supervisor demo --codex-bin $(CODEX_BIN)

bench: codex build
	$(GO) run ./cmd/bench --codex-bin $(CODEX_BIN)

soak: codex build
	$(GO) run ./cmd/soak --codex-bin $(CODEX_BIN) --supervisor-bin ./bin/supervisor

soak-ci: codex build
	$(GO) run ./cmd/soak --codex-bin $(CODEX_BIN) --supervisor-bin ./bin/supervisor --size ci

clean:
	rm -rf bin $(TOOLS)
