#!/usr/bin/env bash
# Checks that every ```swift block of the Markdown files given (default: README.md and
# plugins/README.md) is quoted byte for byte from a compiled file of a package under examples/,
# which scripts/examples.sh builds and tests. The line before each block names its source:
#
#   <!-- sample: examples/app/Sources/Paywall/Paywall.swift -->
#       the whole file;
#   <!-- sample: examples/custom-sink/Sources/AuditSink/AuditSink.swift#factory -->
#       the lines between `// sample: factory` and `// end sample: factory` in that file.
#
# Fails on a block without that line, a source that is not a package's manifest or a file of one of
# its targets, a region missing, unterminated or marked twice, and any difference.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- README.md plugins/README.md

status=0
fail() { echo "doc samples: FAIL: $*" >&2; status=1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The region `name` of `file`, on standard output; status 1 when it is missing, unterminated or
# marked twice.
region() {
    awk -v name="$2" '
        { line = $0; sub(/^[ \t]+/, "", line) }
        line == "// sample: " name { opened++; inside = 1; next }
        line == "// end sample: " name { if (inside) closed++; inside = 0; next }
        inside { print }
        END { exit (opened == 1 && closed == 1) ? 0 : 1 }
    ' "$1"
}

checked=0
for doc in "$@"; do
    rm -rf "$work/blocks" && mkdir "$work/blocks"
    # Each block goes to blocks/<n>; blocks/index gets "<n> <line> <source or ->" per block, and
    # blocks/orphans the line of each sample comment that no ```swift block follows.
    awk -v dir="$work/blocks" '
        function marker(s) { return (s ~ /^<!-- sample: [^ ]+ -->$/) ? substr(s, 14, length(s) - 17) : "" }
        inside && /^[ \t]*```[ \t]*$/ { inside = 0; close(out); prev = $0; next }
        inside { print > out; prev = $0; next }
        /^[ \t]*```swift[ \t]*$/ {
            n++; inside = 1; out = dir "/" n; printf "" > out
            src = marker(prev); if (src == "") src = "-"
            if ($0 !~ /^```/) src = "indented"
            print n, NR, src > (dir "/index")
            prev = $0; next
        }
        { if (marker(prev) != "") print NR - 1 > (dir "/orphans"); prev = $0 }
        END { if (marker(prev) != "") print NR > (dir "/orphans") }
    ' "$doc"
    if [ -s "$work/blocks/orphans" ]; then
        while read -r line; do fail "$doc:$line: a sample comment with no \`\`\`swift block right after it"; done <"$work/blocks/orphans"
    fi
    [ -f "$work/blocks/index" ] || continue
    while read -r n line src; do
        checked=$((checked + 1))
        where="$doc:$line"
        case "$src" in
            -) fail "$where: a swift block without <!-- sample: examples/... --> on the line before it"; continue ;;
            indented) fail "$where: an indented swift block (quote samples at the top level)"; continue ;;
        esac
        file=${src%%#*}
        name=""
        [ "$file" = "$src" ] || name=${src#*#}
        if ! [[ "$file" =~ ^examples/[^/]+/(Package\.swift|(Sources|Tests)/[^/]+/.+\.swift)$ ]]; then
            fail "$where: $file is not a manifest or a target's file of a package under examples/"; continue
        fi
        package=$(cut -d/ -f1-2 <<<"$file")
        if [ ! -f "$package/Package.swift" ]; then fail "$where: $package is not a package"; continue; fi
        if [ ! -f "$file" ]; then fail "$where: $file does not exist"; continue; fi
        if [ -z "$name" ]; then
            cp "$file" "$work/expected"
        elif ! region "$file" "$name" >"$work/expected"; then
            fail "$where: $file has no region \"$name\" (one line \"// sample: $name\", one \"// end sample: $name\" after it)"; continue
        fi
        if ! diff -u --label "$src" --label "$where" "$work/expected" "$work/blocks/$n" >"$work/diff"; then
            fail "$where differs from $src:"
            cat "$work/diff" >&2
        fi
    done <"$work/blocks/index"
done

if [ "$status" -eq 0 ]; then echo "doc samples: ok ($checked swift blocks of $*, each identical to its source under examples/)"; fi
exit "$status"
