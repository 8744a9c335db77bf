# syntax=docker/dockerfile:1
#
# codex-warm supervisor in a container. One container serves one workspace: its /state volume
# holds the daemon's state (sessions.json, the inbox position), codex's login and threads
# (CODEX_HOME) and the threads' working directory. More workspaces are more containers, each with
# its own /state volume and its own WORKSPACE_ID and token; never share a volume between two.
#
#   docker build -t codex-warm .
#   docker volume create codex-warm-ws1
#   docker run --rm -it -v codex-warm-ws1:/state --entrypoint codex codex-warm login --device-auth
#   docker run -d --name codex-warm-ws1 -v codex-warm-ws1:/state --env-file supervisor.env codex-warm
#   docker exec codex-warm-ws1 supervisor status
#
# docker stop sends SIGTERM: the daemon drains running turns (CODEX_WARM_DRAIN_TIMEOUT, 30 s)
# and reaps its codex children; give it `docker stop -t 60`. The health check asks the daemon's
# /healthz over its control socket (`supervisor status --health`), which needs neither the
# local inbox's address nor its token and works with the Molecule inbox too.
#
# No init is needed (`--init` and tini are harmless): as PID 1, `supervisor run` runs the daemon
# as its child and acts as its init, forwarding SIGTERM, SIGINT and SIGHUP and reaping the
# orphans codex tool commands leave (docs/HANDOFF.md, "As PID 1").

ARG GO_VERSION=1.26
ARG NODE_VERSION=20
ARG DEBIAN_VERSION=bookworm
# The codex release this daemon ships with: the Makefile's CODEX_VERSION (within the tested range
# of internal/codexversion).
ARG CODEX_VERSION=0.171.0

# Build: a static supervisor binary.
FROM golang:${GO_VERSION}-${DEBIAN_VERSION} AS build
ARG OUT=/out
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=${VERSION}" -o "${OUT}/supervisor" ./cmd/supervisor

# codex: the pinned npm package, of which only the native binary is kept (no node at run time).
FROM node:${NODE_VERSION}-${DEBIAN_VERSION}-slim AS codex
ARG CODEX_VERSION
ARG OUT=/out
ARG NPM_PREFIX=/codex
RUN npm install --prefix "${NPM_PREFIX}" --no-audit --no-fund --loglevel=error "@openai/codex@${CODEX_VERSION}" \
 && native="$(find "${NPM_PREFIX}/node_modules/@openai" -path '*/vendor/*/bin/codex' -type f | head -n 1)" \
 && test -x "${native}" \
 && "${native}" --version | grep -qx "codex-cli ${CODEX_VERSION}" \
 && install -D -m 0755 "${native}" "${OUT}/codex"

# Run time: supervisor with codex beside it, bubblewrap for codex's sandbox, a user of its own.
FROM debian:${DEBIAN_VERSION}-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap ca-certificates git \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --user-group --home-dir /state --no-create-home --shell /usr/sbin/nologin codex-warm
COPY --from=build /out/supervisor /usr/local/libexec/codex-warm/supervisor
COPY --from=codex /out/codex /usr/local/libexec/codex-warm/codex
RUN ln -s ../libexec/codex-warm/supervisor /usr/local/bin/supervisor \
 && ln -s ../libexec/codex-warm/codex /usr/local/bin/codex \
 && install -d -m 0700 -o codex-warm -g codex-warm /state /state/codex-home /state/supervisor /state/workspace
ENV HOME=/state \
    CODEX_HOME=/state/codex-home \
    CODEX_CHANNEL_MOLECULE_STATE_DIR=/state/supervisor \
    CODEX_WARM_CWD=/state/workspace
VOLUME /state
USER codex-warm
WORKDIR /state/workspace
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=20s --start-period=60s --retries=3 CMD ["supervisor", "status", "--health"]
ENTRYPOINT ["supervisor"]
CMD ["run"]
