#!/usr/bin/env python3
"""Checks OTLP/JSON trace export bodies against the official protobuf definitions.

Usage: check_otlp_json.py FILE   (one ExportTraceServiceRequest JSON object per line, as the otlp
sink's file mode writes them)

OTLP/JSON writes traceId/spanId/parentSpanId as lowercase hex, while protobuf's generic JSON mapping
reads bytes fields as base64 (and would happily mis-read hex). So each id is first checked to be
lowercase hex of the right length, converted to base64, and the request is then parsed strictly
(unknown fields are errors) into opentelemetry.proto's ExportTraceServiceRequest; the decoded ids
must be 16/8 bytes equal to the hex. Prints one summary line; exits 1 on the first problem.
"""
import base64
import json
import re
import sys

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

HEX32 = re.compile(r"^[0-9a-f]{32}$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")


def fail(message):
    print("check_otlp_json: " + message, file=sys.stderr)
    sys.exit(1)


def to_base64(where, value, pattern, size):
    if not isinstance(value, str) or not pattern.match(value):
        fail(f"{where}: expected {size * 2} lowercase hex characters, got {value!r}")
    return base64.b64encode(bytes.fromhex(value)).decode("ascii")


def main():
    if len(sys.argv) != 2:
        fail("usage: check_otlp_json.py FILE")
    path = sys.argv[1]
    requests = spans = events = 0
    seen = {}  # (traceId, spanId) -> line
    parents = []  # (where, traceId, parentSpanId)
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f.read().split("\n") if line]
    if not lines:
        fail(f"{path}: no requests")
    for number, line in enumerate(lines, 1):
        where = f"{path}:{number}"
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"{where}: not JSON: {e}")
        expected = []  # (traceId hex, spanId hex, parent hex or None) in document order
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for i, span in enumerate(ss.get("spans", [])):
                    w = f"{where}: span {i}"
                    trace_hex = span.get("traceId")
                    span_hex = span.get("spanId")
                    span["traceId"] = to_base64(w + " traceId", trace_hex, HEX32, 16)
                    span["spanId"] = to_base64(w + " spanId", span_hex, HEX16, 8)
                    parent_hex = span.get("parentSpanId")
                    if parent_hex is not None:
                        span["parentSpanId"] = to_base64(w + " parentSpanId", parent_hex, HEX16, 8)
                        parents.append((w, trace_hex, parent_hex))
                    for link in span.get("links", []):
                        link["traceId"] = to_base64(w + " link traceId", link.get("traceId"), HEX32, 16)
                        link["spanId"] = to_base64(w + " link spanId", link.get("spanId"), HEX16, 8)
                    if (trace_hex, span_hex) in seen:
                        fail(f"{w}: span {span_hex} of trace {trace_hex} already exported at {seen[(trace_hex, span_hex)]}")
                    seen[(trace_hex, span_hex)] = where
                    expected.append((trace_hex, span_hex, parent_hex))
        request = ExportTraceServiceRequest()
        try:
            json_format.Parse(json.dumps(doc), request, ignore_unknown_fields=False)
        except json_format.ParseError as e:
            fail(f"{where}: rejected by ExportTraceServiceRequest: {e}")
        decoded = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
        if len(decoded) != len(expected):
            fail(f"{where}: {len(decoded)} spans decoded, {len(expected)} written")
        for s, (trace_hex, span_hex, parent_hex) in zip(decoded, expected):
            if len(s.trace_id) != 16 or s.trace_id.hex() != trace_hex:
                fail(f"{where}: traceId decoded as {s.trace_id.hex()} ({len(s.trace_id)} bytes), written {trace_hex}")
            if len(s.span_id) != 8 or s.span_id.hex() != span_hex:
                fail(f"{where}: spanId decoded as {s.span_id.hex()} ({len(s.span_id)} bytes), written {span_hex}")
            if parent_hex is not None and (len(s.parent_span_id) != 8 or s.parent_span_id.hex() != parent_hex):
                fail(f"{where}: parentSpanId decoded as {s.parent_span_id.hex()}, written {parent_hex}")
            if s.start_time_unix_nano == 0 or s.end_time_unix_nano < s.start_time_unix_nano:
                fail(f"{where}: span {span_hex}: start {s.start_time_unix_nano} end {s.end_time_unix_nano}")
            events += len(s.events)
        for rs in request.resource_spans:
            names = {kv.key: kv.value.string_value for kv in rs.resource.attributes}
            if names.get("service.name") != "flowscope":
                fail(f"{where}: resource service.name is {names.get('service.name')!r}, expected 'flowscope'")
            for ss in rs.scope_spans:
                if ss.scope.name != "flowscope":
                    fail(f"{where}: scope name is {ss.scope.name!r}, expected 'flowscope'")
        requests += 1
        spans += len(decoded)
    for w, trace_hex, parent_hex in parents:
        if (trace_hex, parent_hex) not in seen:
            fail(f"{w}: parentSpanId {parent_hex} is no exported span of trace {trace_hex}")
    print(f"ok: {requests} requests, {spans} spans, {events} events")


if __name__ == "__main__":
    main()
