#!/usr/bin/env bash
# Lists, ends and fails on the processes a test run left behind. `make test` runs the suite with
# FLOWSCOPE_TEST_RUN set to a fresh id; every process the tests start inherits it (servers, browsers,
# stub backends, sink programs), so any process still carrying that id once the suite has ended is a
# leftover, whatever its parent. Usage: leftover-processes.sh ID
set -u
id="${1:?usage: leftover-processes.sh RUN-ID}"
carriers() {
    for environ in /proc/[0-9]*/environ; do
        pid="${environ#/proc/}"; pid="${pid%/environ}"
        [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ] && continue
        if tr '\0' '\n' 2>/dev/null < "$environ" | grep -qx "FLOWSCOPE_TEST_RUN=$id"; then
            printf ' %s' "$pid"
        fi
    done
}
# A process a test has just killed may take a moment to go (a browser's helpers): up to 5 s.
for _ in 1 2 3 4 5 6 7 8 9 10; do
    found=$(carriers)
    [ -z "$found" ] && { echo "leftover processes: none"; exit 0; }
    sleep 0.5
done
echo "leftover processes: the suite left these running (a test must end every process it starts, on every path):" >&2
for pid in $found; do
    printf '  %s (parent %s): %s\n' "$pid" "$(awk '/^PPid:/ {print $2}' /proc/$pid/status 2>/dev/null)" \
        "$(tr '\0' ' ' 2>/dev/null < /proc/$pid/cmdline | cut -c1-160)" >&2
done
kill -KILL $found 2>/dev/null
exit 1
