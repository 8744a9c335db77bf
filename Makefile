# All set-up lives here so a fresh clone needs only `make demo` or `make test`.
# The pinned codex npm package is installed into .tools/codex-VERSION/ (ignored by git), one
# directory per version so another release can be tried beside the pin (`make compat`); the tests
# and the demo run its native binary, never the node wrapper.

# CODEX_VERSION is the pin: the codex release this daemon is tested with. It must lie within the
# supported range of package codexversion (a test checks it); docs/development.md says how a new
# release is followed.
CODEX_VERSION ?= 0.171.0
TOOLS         := $(CURDIR)/.tools
CODEX_PREFIX  := $(TOOLS)/codex-$(CODEX_VERSION)
CODEX_STAMP   := $(CODEX_PREFIX)/installed.stamp
GO            ?= go
# TEST_PAR is how many test packages (-p), and tests of one package (-parallel), run at once: the
# number of CPUs, but at least 4. Most end-to-end tests wait on codex children, on a mock model or
# on a deadline they test rather than on the CPU, so on a 2-core machine twice the default
# overlap (docs/test-times.md has the figures).
TEST_PAR      ?= $(shell n=$$(nproc 2>/dev/null || echo 4); [ "$$n" -ge 4 ] || n=4; echo $$n)
GOFLAGS_TEST  ?= -race -count=1 -timeout 30m -p $(TEST_PAR) -parallel $(TEST_PAR)
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2

# The native binary's folder depends on the CPU; npm installs the matching optional package.
CODEX_ARCH := $(shell uname -m | sed -e 's/^x86_64$$/x64/' -e 's/^aarch64$$/arm64/')
CODEX_TRIPLE := $(shell uname -m)-unknown-linux-musl
CODEX_BIN  := $(CODEX_PREFIX)/node_modules/@openai/codex-linux-$(CODEX_ARCH)/vendor/$(CODEX_TRIPLE)/bin/codex

export CODEX_BIN

.PHONY: all build codex codex-bin codex-snapshot compat npm systemd-analyze check-tree test test-report test-shared test-stress vet lint demo bench bench-smoke soak soak-ci clean install uninstall

all: build

# VERSION stamps `supervisor version` and the status header with the commit built.
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/supervisor ./cmd/supervisor

# install puts supervisor and the pinned native codex side by side in LIBEXECDIR, and links
# BINDIR/supervisor to it. The daemon runs the codex beside its own (link-resolved) executable
# before any codex in PATH, so the version it is tested with wins, and a `codex` a user installed
# in BINDIR (npm -g puts its node wrapper there) is neither replaced nor used. DESTDIR stages the
# tree for a package; the link is relative, so the staged tree works where it lies too.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBEXECDIR ?= $(PREFIX)/libexec/codex-warm

install: codex build
	install -d -m 0755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR)
	install -m 0755 bin/supervisor $(DESTDIR)$(LIBEXECDIR)/supervisor
	install -m 0755 $(CODEX_BIN) $(DESTDIR)$(LIBEXECDIR)/codex
	ln -sfn "$$(realpath -m --relative-to=$(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR)/supervisor)" $(DESTDIR)$(BINDIR)/supervisor
	@echo "installed $(DESTDIR)$(BINDIR)/supervisor -> $(LIBEXECDIR)/supervisor, with codex $(CODEX_VERSION) beside it"
	@echo "log codex in as the daemon's user: $(LIBEXECDIR)/codex login; then check: supervisor doctor"

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/supervisor $(DESTDIR)$(LIBEXECDIR)/supervisor $(DESTDIR)$(LIBEXECDIR)/codex
	-rmdir $(DESTDIR)$(LIBEXECDIR)

# codex installs the pinned @openai/codex package once; the stamp makes later runs a no-op.
codex: $(CODEX_STAMP)

$(CODEX_STAMP):
	@command -v npm >/dev/null || $(MAKE) --no-print-directory npm
	@# .tools/codex-VERSION was a stamp file before versions had directories of their own.
	@if [ -f $(CODEX_PREFIX) ]; then rm -f $(CODEX_PREFIX); fi
	mkdir -p $(CODEX_PREFIX)
	npm install --prefix $(CODEX_PREFIX) --no-audit --no-fund --loglevel=error @openai/codex@$(CODEX_VERSION)
	@test -x $(CODEX_BIN) || { echo "native codex binary not found at $(CODEX_BIN)" >&2; exit 1; }
	$(CODEX_BIN) --version
	touch $@

# codex-bin prints the native binary's path, for running one package's tests by hand.
codex-bin:
	@echo $(CODEX_BIN)

# codex-snapshot rewrites the wire-contract snapshot of package internal/protocol/schema (the app-server
# schema of the types the daemon uses, and `codex features list`) from the codex of CODEX_VERSION:
# run it when the pin moves (docs/development.md).
codex-snapshot: codex
	cd internal/protocol/schema && $(GO) generate .

# compat tries codex CODEX_VERSION beside the pin before a bump: it installs it into its own
# .tools/codex-VERSION/, diffs its wire schema and its features against the pin's snapshot (every
# change printed; only what breaks the daemon's contract fails), runs the whole test suite on it
# (the end-to-end tests run that codex), and ends with one line: `compat X: PASS`, or FAIL and
# what failed. The logs stay in bin/compat-VERSION/.
COMPAT_DIR = bin/compat-$(CODEX_VERSION)

compat: codex systemd-analyze
	@mkdir -p $(COMPAT_DIR); failed=; \
	for step in WireContract Features; do \
		log=$(COMPAT_DIR)/$$step.log; \
		CODEX_WARM_REQUIRE_CODEX=1 $(GO) test -count=1 -v -run "^Test$$step\$$" ./internal/protocol/schema > $$log 2>&1 || failed="$$failed $$step"; \
		sed -n 's/^ *codex_test\.go:[0-9]*: //p' $$log; \
	done; \
	echo "compat $(CODEX_VERSION): the test suite on this codex ($(COMPAT_DIR)/suite.log)"; \
	start=$$(date +%s); \
	$(GO_TEST) > $(COMPAT_DIR)/suite.log 2>&1 || \
		failed="$$failed suite ($$(sed -n 's/^--- FAIL: \([^ ]*\).*/\1/p' $(COMPAT_DIR)/suite.log | paste -sd ' ' -))"; \
	grep -E '^(--- FAIL|FAIL)' $(COMPAT_DIR)/suite.log || true; \
	echo "compat $(CODEX_VERSION): the suite took $$(($$(date +%s) - start)) s"; \
	if [ -z "$$failed" ]; then echo "compat $(CODEX_VERSION): PASS"; \
	else echo "compat $(CODEX_VERSION): FAIL ($${failed# }; logs in $(COMPAT_DIR))"; exit 1; fi

# npm comes from Debian's packages when the machine lacks it (root can install; others are told how).
npm:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; \
	else \
		echo "npm is required to install @openai/codex; on Debian: sudo apt-get install -y nodejs npm" >&2; exit 1; \
	fi

# systemd-analyze checks deploy/systemd/supervisor.service (package deploy's tests); it comes
# from Debian's systemd package, which installs without starting anything.
systemd-analyze:
	@command -v systemd-analyze >/dev/null || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd; \
	else \
		echo "systemd-analyze is required to check the systemd unit; on Debian: sudo apt-get install -y systemd" >&2; exit 1; \
	fi

# check-tree refuses tracked build outputs: compiled executables and files over 256 KiB.
check-tree:
	./.ci/check-tree

vet:
	$(GO) vet ./...

lint:
	$(GO) run $(STATICCHECK) ./...

# GO_TEST is the test command of test and test-stress. CODEX_WARM_REQUIRE_CODEX turns "codex
# missing" into a failure instead of a skip, so the end-to-end tests can never be skipped here.
GO_TEST = CODEX_WARM_REQUIRE_CODEX=1 $(GO) test $(GOFLAGS_TEST) ./...

# test is what CI runs.
test: check-tree codex systemd-analyze vet lint
	$(GO_TEST)

# test-shared runs the end-to-end suite (cmd/supervisor) with shared codex children: every
# daemon the suite starts runs --threads-per-child SHARED_THREADS (8), chats' threads eight to a
# child (docs/operating.md), unless a test sets its own.
SHARED_THREADS ?= 8

test-shared: codex
	CODEX_WARM_TEST_THREADS_PER_CHILD=$(SHARED_THREADS) CODEX_WARM_REQUIRE_CODEX=1 $(GO) test $(GOFLAGS_TEST) ./cmd/supervisor/

# test-report runs the test command with -json into TEST_JSON and prints where the time went:
# the run's wall time, each package's time and the slowest tests (cmd/testreport; the figures in
# docs/test-times.md come from it). It fails when the tests fail, after the report.
TEST_JSON ?= bin/test.json

test-report: codex systemd-analyze
	@mkdir -p $(dir $(TEST_JSON))
	@start=$$(date +%s); $(GO_TEST) -json > $(TEST_JSON); rc=$$?; \
	echo "test-report: go test exited $$rc after $$(($$(date +%s) - start)) s (wall, build included)"; \
	$(GO) run ./cmd/testreport $(TEST_JSON) && exit $$rc

# test-stress runs the test command STRESS_RUNS times beside two busy CPU loops: the tests must
# wait on events, never on the machine being fast. The loops are stopped by pid however the
# recipe ends (a failed run, Ctrl-C, SIGTERM). Every run goes ahead; the target fails if any did.
STRESS_RUNS ?= 2

test-stress: codex systemd-analyze
	@y1=; y2=; failed=0; \
	trap 'kill $$y1 $$y2 2>/dev/null; wait $$y1 $$y2 2>/dev/null; true' EXIT; \
	trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP; \
	yes >/dev/null & y1=$$!; \
	yes >/dev/null & y2=$$!; \
	echo "test-stress: busy loops pid $$y1 and $$y2; $(STRESS_RUNS) run(s) of the test command (GOFLAGS_TEST=$(GOFLAGS_TEST))"; \
	i=1; while [ $$i -le $(STRESS_RUNS) ]; do \
		start=$$(date +%s); \
		if $(GO_TEST); then result=passed; else result=FAILED; failed=$$((failed + 1)); fi; \
		echo "test-stress: run $$i of $(STRESS_RUNS) $$result in $$(($$(date +%s) - start)) s"; \
		i=$$((i + 1)); \
	done; \
	echo "test-stress: $$failed of $(STRESS_RUNS) run(s) failed beside two busy CPU loops"; \
	[ $$failed -eq 0 ]

demo: codex build
	./bin/supervisor demo --codex-bin $(CODEX_BIN)

# The bench starts the daemon from scratch directories, so its path is absolute. Every comparison
# runs on the transport production uses (websocket, TLS, a proxy adding --rtt, 50 ms by default)
# and again on loopback HTTP, the second column.
bench: codex build
	$(GO) run ./cmd/bench --codex-bin $(CODEX_BIN) --supervisor-bin $(CURDIR)/bin/supervisor

# bench-smoke is the quick bench, run by CI: it proves that bench's arguments resolve on a fresh
# clone and that every comparison still runs to the end on the production path (websocket, TLS,
# 50 ms round trip; about 2 minutes; its figures are too small a sample for docs/benchmarks.md).
bench-smoke: codex build
	$(GO) run ./cmd/bench --codex-bin $(CODEX_BIN) --supervisor-bin $(CURDIR)/bin/supervisor --quick

soak: codex build
	$(GO) run ./cmd/soak --codex-bin $(CODEX_BIN) --supervisor-bin ./bin/supervisor

soak-ci: codex build
	$(GO) run ./cmd/soak --codex-bin $(CODEX_BIN) --supervisor-bin ./bin/supervisor --size ci

clean:
	rm -rf bin $(TOOLS)
