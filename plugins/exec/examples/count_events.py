#!/usr/bin/env python3
"""FlowScope exec sink example: counts events by name and writes a summary file.

Usage (config/flowscope.json5):
    sinks: [{ type: "exec", command: ["python3", "plugins/exec/examples/count_events.py", ".flowscope/counts.json"] }]

Reads the exec protocol on stdin: a hello line {"type":"hello","protocol":1,"version":...}, then one
event envelope per line. Writes {"version", "protocol", "events", "byName": {name: count},
"lastSeq", "complete"} to the summary file (atomically: a temporary file then a rename) every
`--every` events (default 100) and at end of input, when "complete" becomes true.
"""
import json
import os
import sys


def write_summary(path, summary):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(summary, f, sort_keys=True)
    os.replace(tmp, path)


def main():
    args = sys.argv[1:]
    every = 100
    if len(args) >= 2 and args[0] == "--every":
        every = int(args[1])
        args = args[2:]
    if len(args) != 1:
        print("usage: count_events.py [--every N] SUMMARY.json", file=sys.stderr)
        return 2
    path = args[0]
    summary = {"version": None, "protocol": None, "events": 0, "byName": {}, "lastSeq": None,
               "complete": False, "badLines": 0}
    for line in sys.stdin:
        try:
            obj = json.loads(line)
        except ValueError:
            summary["badLines"] += 1
            continue
        if obj.get("type") == "hello":
            summary["version"] = obj.get("version")
            summary["protocol"] = obj.get("protocol")
            continue
        name = obj.get("name", "?")
        summary["events"] += 1
        summary["byName"][name] = summary["byName"].get(name, 0) + 1
        summary["lastSeq"] = obj.get("seq")
        if summary["events"] % every == 0:
            write_summary(path, summary)
    summary["complete"] = True
    write_summary(path, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
