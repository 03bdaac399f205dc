#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/targets and runs them over fuzz/corpus/<target>.
#
#   fuzz/run.sh                 build, then run every target for RUNS executions each
#   fuzz/run.sh json5 ingest    only these targets
#   fuzz/run.sh --build-only    build the binaries into .build/fuzz/bin and stop
#   fuzz/run.sh --no-build      run the binaries already in .build/fuzz/bin
#
# Environment: RUNS (default 1000000 executions per target; 0 runs each corpus once, as `make test`
# does), MAX_TIME (seconds per target, default 1800), MAX_LEN (bytes per input, default 65536),
# SANITIZERS (default fuzzer,address), TIMEOUT (seconds one input may take before libFuzzer calls it
# a hang, default 10), SWIFT (the swift driver, default swift).
#
# How it builds: SwiftPM compiles the package's library modules with coverage instrumentation
# (the sanitizers but fuzzer, plus -sanitize-coverage=edge,trace-cmp,inline-8bit-counters,pc-table;
# -enable-testing so internal decoders are reachable) into .build/fuzz; each target file (plus
# targets/Support.swift) is then linked with swiftc -sanitize=fuzzer,... against those objects,
# leaving out the executables' objects (flowscope's main, the asset embedder). New inputs go to
# .build/fuzz/corpus/<target> (the committed seed corpus is read, never written); crashes are
# written to .build/fuzz/crashes/<target>/, and the final stats line of each run to
# .build/fuzz/logs/<target>.log.
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_TARGETS=(json5 scenario config rest cache ingest envelope fallback layout)

RUNS=${RUNS:-1000000}
MAX_TIME=${MAX_TIME:-1800}
MAX_LEN=${MAX_LEN:-65536}
TIMEOUT=${TIMEOUT:-10}
SANITIZERS=${SANITIZERS:-fuzzer,address}
BUILD=.build/fuzz
BIN=$BUILD/bin

build_only=0
no_build=0
targets=()
for arg in "$@"; do
    case "$arg" in
        --build-only) build_only=1 ;;
        --no-build) no_build=1 ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        *) targets+=("$arg") ;;
    esac
done
[[ ${#targets[@]} -eq 0 ]] && targets=("${ALL_TARGETS[@]}")

# The package's modules are built with the sanitizers other than `fuzzer` plus explicit coverage
# flags: `--sanitize=fuzzer` would link libFuzzer's `main` into the package's executables (the
# EmbedAssets build tool among them) and fail. libFuzzer itself comes in when each target is linked.
sanitize_flags=()
IFS=',' read -ra sanitizers <<< "$SANITIZERS"
for s in "${sanitizers[@]}"; do [[ $s == fuzzer ]] || sanitize_flags+=(--sanitize="$s"); done
if [[ ${#sanitize_flags[@]} -eq 0 ]]; then
    echo "SANITIZERS=$SANITIZERS: name a sanitizer besides fuzzer (e.g. fuzzer,address): the coverage instrumentation needs one" >&2
    exit 2
fi

if [[ $no_build -eq 0 ]]; then
echo "== building instrumented modules into $BUILD ($SANITIZERS)"
"${SWIFT:-swift}" build -c release --build-path "$BUILD" "${sanitize_flags[@]}" -Xswiftc -use-ld=lld -Xswiftc -enable-testing \
    -Xswiftc -sanitize-coverage=edge,trace-cmp,inline-8bit-counters,pc-table --target FlowScopeCLI

# Every library module object: not the executables' (flowscope's main, the asset embedding build tool).
mapfile -t objects < <(find "$BUILD/release/" -path '*.build/*.o' -print | grep -v -e 'Tests.build/' -e '/flowscope.build/' -e '/AssetEmbedder[^/]*\.build/' | sort)
[[ ${#objects[@]} -gt 0 ]] || { echo "no module objects found under $BUILD/release" >&2; exit 1; }

mkdir -p "$BIN"
module_maps=()
for m in Sources/C*/module.modulemap; do module_maps+=(-Xcc "-fmodule-map-file=$m"); done
for t in "${targets[@]}"; do
    [[ -f fuzz/targets/$t.swift ]] || { echo "unknown target $t (have: ${ALL_TARGETS[*]})" >&2; exit 2; }
    if [[ ! -x $BIN/$t || fuzz/targets/$t.swift -nt $BIN/$t || fuzz/targets/Support.swift -nt $BIN/$t || $(find "$BUILD/release/" -name '*.o' -newer "$BIN/$t" | head -1) ]]; then
        echo "== linking $BIN/$t"
        swiftc -O -parse-as-library -sanitize="$SANITIZERS" -module-name "Fuzz_$t" \
            -I "$BUILD/release/Modules" -I "$BUILD/release" "${module_maps[@]}" $(pkg-config --cflags-only-I libmicrohttpd openssl sqlite3 | sed 's/-I/-Xcc -I/g') \
            "fuzz/targets/$t.swift" fuzz/targets/Support.swift "${objects[@]}" \
            -lmicrohttpd -lssl -lcrypto -lsqlite3 -use-ld=lld -o "$BIN/$t"
    fi
done
fi
[[ $build_only -eq 1 ]] && exit 0

status=0
for t in "${targets[@]}"; do
    mkdir -p "$BUILD/corpus/$t" "$BUILD/crashes/$t" "$BUILD/logs"
    echo "== fuzzing $t: $RUNS runs (at most ${MAX_TIME}s)"
    if "$BIN/$t" -runs="$RUNS" -max_total_time="$MAX_TIME" -max_len="$MAX_LEN" -timeout="$TIMEOUT" -rss_limit_mb=4096 \
        -artifact_prefix="$BUILD/crashes/$t/" -print_final_stats=1 \
        "$BUILD/corpus/$t" "fuzz/corpus/$t" > "$BUILD/logs/$t.log" 2>&1; then
        echo "   $(grep -E '^Done [0-9]+ runs' "$BUILD/logs/$t.log" || tail -1 "$BUILD/logs/$t.log")"
        grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' "$BUILD/logs/$t.log" | sed 's/^/   /'
    else
        status=1
        echo "   FAILED: see $BUILD/logs/$t.log and $BUILD/crashes/$t/"
        grep -E 'ERROR|Fatal error|fuzz invariant|SUMMARY' "$BUILD/logs/$t.log" | head -5 | sed 's/^/   /'
    fi
done
exit $status
