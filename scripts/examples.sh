#!/usr/bin/env bash
# Builds and tests examples/ as outside packages that depend on this repository by path, as a user's
# package would; each in its own scratch directory under .build/examples. Then checks that the
# Swift samples of README.md, plugins/README.md and docs/getting-started.md are quoted exactly from
# them, and runs the programs they build. Part of `make test`; needs .build/debug/flowscope (`swift build`).
set -euo pipefail
cd "$(dirname "$0")/.."
SWIFT="${SWIFT:-swift}"
flowscope=.build/debug/flowscope

# Every sample of the docs is a file (or a marked region of one) of these packages.
bash scripts/check-doc-samples.sh README.md plugins/README.md docs/getting-started.md

for package in examples/*/Package.swift; do
    example=$(basename "$(dirname "$package")")
    echo "examples: $example"
    "$SWIFT" build --package-path "examples/$example" --scratch-path ".build/examples/$example" --build-tests
    "$SWIFT" test --package-path "examples/$example" --scratch-path ".build/examples/$example" --skip-build
done

# The app's executables link the engine (and the event SDK) and no test framework.
for app in .build/examples/app/debug/paywall-app .build/examples/app/debug/paywall-events; do
    if ldd "$app" | grep -E 'libTesting|libXCTest'; then
        echo "examples: FAIL: $app links a test framework" >&2
        exit 1
    fi
    echo "examples: $app links no test framework"
done

# Both programs against a stub backend on a free port: the flow arrives, and paywall-events' pipeline
# prints the engine's events on standard error.
work=$(mktemp -d)
stub_pid=""
cleanup() {
    if [ -n "$stub_pid" ]; then kill "$stub_pid" 2>/dev/null || true; wait "$stub_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
"$flowscope" stub-backend --port 0 >"$work/stub.out" 2>"$work/stub.err" &
stub_pid=$!
for _ in $(seq 100); do grep -q ' on http://' "$work/stub.out" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.]*:[0-9]*' "$work/stub.out") || { echo "examples: FAIL: the stub backend did not start" >&2; cat "$work/stub.err" >&2; exit 1; }
.build/examples/app/debug/paywall-app "$url" >"$work/app.out"
grep -q '^main_paywall: variation .* from network$' "$work/app.out" || { echo "examples: FAIL: paywall-app printed:" >&2; cat "$work/app.out" >&2; exit 1; }
echo "examples: paywall-app: $(cat "$work/app.out")"
.build/examples/app/debug/paywall-events "$url" >"$work/events.out" 2>"$work/events.err"
grep -q '^main_paywall: variation .* from network$' "$work/events.out" || { echo "examples: FAIL: paywall-events printed:" >&2; cat "$work/events.out" >&2; exit 1; }
for event in fetch.start fetch.end; do
    grep -q "main_paywall  $event" "$work/events.err" || { echo "examples: FAIL: paywall-events printed no $event event:" >&2; cat "$work/events.err" >&2; exit 1; }
done
echo "examples: paywall-events: $(cat "$work/events.out"), $(wc -l <"$work/events.err") events on standard error"

# The custom distribution knows its own sink type; stock flowscope refuses it.
audit=".build/examples/custom-sink/debug/flowscope-audit"
out=$("$audit" check-config examples/custom-sink/flowscope.json5)
echo "examples: $out"
grep -q 'sinks: metrics, memory, audit' <<<"$out"
if stock=$("$flowscope" check-config examples/custom-sink/flowscope.json5 2>&1); then
    echo "examples: FAIL: stock flowscope accepted a config with type \"audit\"" >&2
    exit 1
fi
grep -q 'unknown sink type "audit"' <<<"$stock"

# The audit factory's validate: check-config refuses a path serve could not open.
printf '{ sinks: [ { type: "audit", path: "/nonexistent-dir/audit.log" } ] }\n' >"$work/bad-audit.json5"
if bad=$("$audit" check-config "$work/bad-audit.json5" 2>&1); then
    echo "examples: FAIL: check-config accepted an audit path in a missing directory: $bad" >&2
    exit 1
fi
grep -q '\$.sinks\[0\].path: /nonexistent-dir/audit.log: directory /nonexistent-dir does not exist' <<<"$bad" \
    || { echo "examples: FAIL: check-config said: $bad" >&2; exit 1; }
echo "examples: $bad"
echo "examples: ok"
