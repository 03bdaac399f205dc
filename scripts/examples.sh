#!/usr/bin/env bash
# Builds and tests examples/ as outside packages that depend on this repository by path, as a user's
# package would; each in its own scratch directory under .build/examples. Part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
SWIFT="${SWIFT:-swift}"

for example in app custom-sink; do
    echo "examples: $example"
    "$SWIFT" build --package-path "examples/$example" --scratch-path ".build/examples/$example" --build-tests
    "$SWIFT" test --package-path "examples/$example" --scratch-path ".build/examples/$example" --skip-build
done

# The app's executable links the engine and no test framework.
app=".build/examples/app/debug/paywall-app"
if ldd "$app" | grep -E 'libTesting|libXCTest'; then
    echo "examples: FAIL: $app links a test framework" >&2
    exit 1
fi
echo "examples: $app links no test framework"

# The custom distribution knows its own sink type; stock flowscope refuses it.
audit=".build/examples/custom-sink/debug/flowscope-audit"
out=$("$audit" check-config examples/custom-sink/flowscope.json5)
echo "examples: $out"
grep -q 'sinks: metrics, memory, audit' <<<"$out"
if stock=$(.build/debug/flowscope check-config examples/custom-sink/flowscope.json5 2>&1); then
    echo "examples: FAIL: stock flowscope accepted a config with type \"audit\"" >&2
    exit 1
fi
grep -q 'unknown sink type "audit"' <<<"$stock"
echo "examples: ok"
