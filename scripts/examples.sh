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
serve_pid=""
cleanup() {
    if [ -n "$stub_pid" ]; then kill "$stub_pid" 2>/dev/null || true; wait "$stub_pid" 2>/dev/null || true; fi
    if [ -n "$serve_pid" ]; then kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; fi
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

# The distribution configured with outside sinks only: the outside store answers the dashboard API
# (held to its newest 3 events here, so its answers differ from the memory sink's that serve adds) and
# the audit sink's family joins /metrics (promtool accepts it). The config is copied out, so the audit
# file is written there, not into the repository.
mkdir -p "$work/outside"
sed 's/capacity: 20000/capacity: 3/' examples/custom-sink/outside.json5 >"$work/outside/outside.json5"
"$audit" serve --no-demo --port 0 --config "$work/outside/outside.json5" --state-dir "$work/outside/state" \
    >"$work/outside.out" 2>"$work/outside.err" &
serve_pid=$!
for _ in $(seq 200); do grep -q 'serving https://' "$work/outside.out" && break; sleep 0.1; done
port=$(grep -o 'serving https://localhost:[0-9]*' "$work/outside.out" | grep -o '[0-9]*$') \
    || { echo "examples: FAIL: flowscope-audit serve did not start" >&2; cat "$work/outside.err" >&2; exit 1; }
ca="$work/outside/state/tls/cert.pem"
python3 - >"$work/outside-events.jsonl" <<'PY'
import json
def event(i, name, placement, t, attrs, trace):
    return {"ts": 1796206272.0 + t, "t": t, "run": "outside", "trace": f"{trace:032x}", "span": f"{trace:016x}",
            "name": name, "placement": placement, "attrs": attrs}
lines = [
    event(1, "fetch.start", "p1", 0.0, {"call": "getFlow"}, 1),
    event(2, "fetch.end", "p1", 0.25, {"call": "getFlow", "source": "network", "duration": 0.25}, 1),
    event(3, "fetch.start", "p2", 1.0, {"call": "getFlow"}, 2),
    event(4, "fetch.end", "p2", 3.0, {"call": "getFlow", "source": "fallbackFile", "duration": 2.0, "errorCode": 2005}, 2),
    event(5, "fetch.start", "p1", 4.0, {"call": "getFlow"}, 3),
]
for e in lines: print(json.dumps(e))
PY
curl -sf --cacert "$ca" -H "Authorization: Bearer $(cat "$work/outside/state/token")" -H "Content-Type: application/x-ndjson" \
    --data-binary @"$work/outside-events.jsonl" "https://localhost:$port/api/ingest" >/dev/null \
    || { echo "examples: FAIL: ingest into flowscope-audit serve" >&2; exit 1; }
get() { curl -sf --cacert "$ca" "https://localhost:$port$1"; }
for _ in $(seq 50); do get "/api/runs" | grep -q '"outside"' && break; sleep 0.1; done
get "/api/runs" >"$work/outside-runs.json"
get "/api/calls?run=outside" >"$work/outside-calls.json"
get "/api/placements?run=outside" >"$work/outside-placements.json"
get "/api/sinks" >"$work/outside-sinks.json"
get "/api/events?run=outside" >"$work/outside-events.json"
get "/metrics" >"$work/outside-metrics.txt"
python3 - "$work" <<'PY' || { echo "examples: FAIL: the outside sinks' answers:" >&2; head -c 2000 "$work"/outside-*.json* >&2; exit 1; }
import json, sys
work = sys.argv[1]
load = lambda name: json.load(open(f"{work}/{name}"))
# The recent store answers: it counts the run's 5 events and holds the newest 3 (seq 3-5), whose
# calls are a finished p2 fetch (its start and end) and an open p1 fetch; a coverage that says so.
run = next(r for r in load("outside-runs.json")["runs"] if r["id"] == "outside")
assert run["events"] == 5 and run["fetches"] == 2 and run["errors"] == 1, run
assert [e["seq"] for e in load("outside-events.json")["events"]] == [3, 4, 5], load("outside-events.json")
answer = load("outside-calls.json")
calls = answer["calls"]
assert [(c["placement"], c["finished"]) for c in calls] == [("p1", False), ("p2", True)], calls
assert answer["coverage"]["events"] == 3 and answer["coverage"]["complete"] is False, answer["coverage"]
placements = {p["placement"]: p for p in load("outside-placements.json")["placements"]}
assert set(placements) == {"p1", "p2"} and placements["p2"]["errors"] == 1 and placements["p1"]["open"] == 1, placements
sinks = {s["name"]: s for s in load("outside-sinks.json")["sinks"]}
assert {"audit", "recent"} <= set(sinks) and all(s["up"] for s in sinks.values()), sinks
metrics = open(f"{work}/outside-metrics.txt").read()
assert 'audit_lines_total{outcome="written"} 5\n' in metrics and 'flowscope_sink_up{sink="recent"} 1' in metrics, metrics
print(f"examples: flowscope-audit serve with outside sinks: run of {run['events']} events, the store's newest 3 "
      f"answered ({len(calls)} calls, placements {sorted(placements)}), /metrics {metrics.count(chr(10))} lines")
PY
promtool check metrics <"$work/outside-metrics.txt" \
    || { echo "examples: FAIL: promtool refused the audit sink's /metrics" >&2; exit 1; }
[ "$(wc -l <"$work/outside/audit.log")" -eq 5 ] || { echo "examples: FAIL: audit.log:" >&2; cat "$work/outside/audit.log" >&2; exit 1; }
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; serve_pid=""
# Two invocations of the app's tests attached to a running serve, from another folder than serve's,
# with the line serve prints (the same as `flowscope attach-env`) and FLOWSCOPE_ATTACH_REQUIRED: the
# second one with a test failing on purpose. /api/runs holds two invocations with their verdicts.
root=$(pwd)
mkdir -p "$work/serve"
(cd "$work/serve" && exec "$root/$flowscope" serve --no-demo --port 0) >"$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
for _ in $(seq 200); do grep -q 'attach tests: ' "$work/serve.out" && break; sleep 0.1; done
port=$(grep -o 'serving https://localhost:[0-9]*' "$work/serve.out" | grep -o '[0-9]*$') \
    || { echo "examples: FAIL: serve did not start" >&2; cat "$work/serve.err" >&2; exit 1; }
printed=$(grep -o 'attach tests: .*' "$work/serve.out" | sed 's/^attach tests: //')
attach=$(cd "$work/serve" && "$root/$flowscope" attach-env --port "$port")
[ "$printed" = "$attach" ] || { echo "examples: FAIL: serve printed '$printed', attach-env '$attach'" >&2; exit 1; }
echo "examples: $attach"
(eval "$attach"; export FLOWSCOPE_ATTACH_REQUIRED=1 FLOWSCOPE_INVOCATION=examples-1
 "$SWIFT" test --package-path examples/app --scratch-path .build/examples/app --skip-build) >"$work/first.out" 2>&1 \
    || { echo "examples: FAIL: the attached test run failed:" >&2; cat "$work/first.out" >&2; exit 1; }
if (eval "$attach"; export FLOWSCOPE_ATTACH_REQUIRED=1 FLOWSCOPE_INVOCATION=examples-2 PAYWALL_DEMO_FAILURE=1
    "$SWIFT" test --package-path examples/app --scratch-path .build/examples/app --skip-build) >"$work/second.out" 2>&1; then
    echo "examples: FAIL: the run with a test failing on purpose passed" >&2; exit 1
fi
grep -q 'timeline (aTestThatFailsOnPurpose' "$work/second.out" \
    || { echo "examples: FAIL: the failing #expect printed no timeline:" >&2; cat "$work/second.out" >&2; exit 1; }
if grep -q 'not streaming test events' "$work/first.out" "$work/second.out"; then
    echo "examples: FAIL: attaching failed:" >&2; grep 'not streaming' "$work/first.out" "$work/second.out" >&2; exit 1
fi
curl -sf --cacert "$work/serve/.flowscope/tls/cert.pem" "https://localhost:$port/api/runs?kind=test&order=status&limit=1000" >"$work/runs.json"
python3 - "$work/runs.json" <<'PY' || { echo "examples: FAIL: /api/runs:" >&2; head -c 3000 "$work/runs.json" >&2; exit 1; }
import json, sys
answer = json.load(open(sys.argv[1]))
runs, invocations = answer["runs"], {i["id"]: i for i in answer["invocations"]}
assert set(invocations) == {"examples-1", "examples-2"}, invocations.keys()
first, second = invocations["examples-1"], invocations["examples-2"]
assert first["failed"] == 0 and first["passed"] >= 2, first
assert second["failed"] == 1 and second["passed"] == first["passed"], second
failing = [r for r in runs if r["status"] == "failed"]
assert len(failing) == 1 and failing[0]["invocation"] == "examples-2" and "aTestThatFailsOnPurpose" in failing[0]["test"], failing
assert runs[0] is failing[0] or runs[0] == failing[0], "order=status lists the failure first"
assert "flow.source" in failing[0]["failures"][0], failing[0]["failures"]
print(f"examples: /api/runs: invocation examples-1 {first['passed']} passed, examples-2 {second['passed']} passed and 1 failed: {failing[0]['id']}")
PY
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; serve_pid=""
echo "examples: ok"
