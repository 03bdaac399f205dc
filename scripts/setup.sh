#!/usr/bin/env bash
# Installs what FlowScope needs on a Debian/Ubuntu machine, only when it is missing.
# Used by `make run` and `make test`; safe to run again.
set -euo pipefail

# Debian packages: the C libraries the package links, and the real tools the tests use.
APT_PACKAGES="pkg-config libmicrohttpd-dev libssl-dev libsqlite3-dev sqlite3"
if [ "${1:-}" = "test" ]; then
    APT_PACKAGES="$APT_PACKAGES prometheus chromium curl openssl python3-venv"
fi

missing=""
for p in $APT_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing$missing"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# Python packages for checks against official definitions (OTLP protobufs), in a private venv.
if [ "${1:-}" = "test" ]; then
    VENV=".build/pyenv"
    if ! "$VENV/bin/python" -c "import opentelemetry.proto" 2>/dev/null; then
        echo "setup: installing opentelemetry-proto into $VENV"
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install --quiet --disable-pip-version-check opentelemetry-proto
    fi
fi
