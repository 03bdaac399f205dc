#!/bin/sh
# Builds and runs the client_golang render benchmark against Debian's packaged Go libraries
# (no network): apt-get install -y golang-go golang-github-prometheus-client-golang-dev
# Usage: bench/go-metrics/run.sh [-runs 7] [-renders 100]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${TMPDIR:-/tmp}/flowscope-go-metrics
mkdir -p "$out"
if ! command -v go >/dev/null 2>&1 || [ ! -d /usr/share/gocode/src/github.com/prometheus/client_golang ]; then
    echo "needs: apt-get install -y golang-go golang-github-prometheus-client-golang-dev" >&2
    exit 2
fi
# GOPATH mode against /usr/share/gocode: Debian's packages, no module download.
GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$out/cache" GOFLAGS= \
    go build -o "$out/go-metrics" "$here/main.go"
"$out/go-metrics" "$@"
