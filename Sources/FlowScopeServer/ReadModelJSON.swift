import FlowEvents
import FlowJSON

// The JSON of the dashboard API, rendered here once from the read model's typed values
// (docs/api.md has the shapes; docs/events-and-metrics.md, "Numbers", what each number counts).

extension Call {
    /// The JSON object of `GET /api/calls`.
    public var jsonValue: JSONValue {
        var o: [String: JSONValue] = [
            "trace": .string(trace), "run": .string(run), "kind": .string(kind.rawValue), "call": name.map(JSONValue.string) ?? .null,
            "placement": placement.map(JSONValue.string) ?? .null,
            "source": source.map(JSONValue.string) ?? .null, "audience": audience.map(JSONValue.string) ?? .null,
            "variation": variation.map(JSONValue.string) ?? .null, "targetingLost": .bool(targetingLost),
            "errorCode": errorCode ?? .null, "duration": duration.map(JSONValue.number) ?? .null,
            "start": .string(ISO8601.format(start)), "startT": .number(startT), "endT": .number(endT),
            "finished": .bool(finished), "incomplete": .bool(isIncomplete), "timeouts": .number(Double(timeouts.count)),
            "fallbacks": .number(Double(fallbacks.count)), "requests": .number(Double(requests.count)),
            "events": .number(Double(events)), "firstSeq": .number(Double(firstSeq)), "lastSeq": .number(Double(lastSeq)),
        ]
        if !placements.isEmpty { o["placements"] = .array(placements.map(JSONValue.string)) }
        if !failed.isEmpty { o["failed"] = .object(failed) }
        return .object(o)
    }
}

extension Coverage {
    /// `{"events", "calls", "complete", "firstSeq", "lastSeq", "from", "to"}` (times ISO 8601, null when no event was read).
    public var jsonValue: JSONValue {
        ["events": .number(Double(events)), "calls": .number(Double(calls)), "complete": .bool(complete),
         "firstSeq": firstSeq.map { .number(Double($0)) } ?? .null, "lastSeq": lastSeq.map { .number(Double($0)) } ?? .null,
         "from": from.map { .string(ISO8601.format($0)) } ?? .null, "to": to.map { .string(ISO8601.format($0)) } ?? .null]
    }
}

extension PlacementStatistics {
    /// `{"placement","calls","fetches","open","sources":{...},"errors","targetingLost","timeouts",
    /// "duration":{"p50","p95","samples"},"lastPreloadError":{"code","ts","seq"}|null}`; p50/p95 are
    /// null without samples.
    public var jsonValue: JSONValue {
        [
            "placement": .string(placement), "calls": .number(Double(calls)), "fetches": .number(Double(fetches)),
            "open": .number(Double(open)), "sources": .object(sources.mapValues { .number(Double($0)) }),
            "errors": .number(Double(errors)), "targetingLost": .number(Double(targetingLost)),
            "timeouts": .number(Double(timeouts)),
            "duration": ["p50": duration.p50.map(JSONValue.number) ?? .null, "p95": duration.p95.map(JSONValue.number) ?? .null,
                         "samples": .number(Double(duration.samples))],
            "lastPreloadError": lastPreloadError.map {
                ["code": $0.code, "ts": .string(ISO8601.format($0.ts)), "seq": .number(Double($0.seq))]
            } ?? .null,
        ]
    }
}

extension CallQuery.Result {
    /// The body of `GET /api/calls` (without `latestSeq` and `epoch`, which the route adds):
    /// `{"calls": [...], "counts": {"matched", "returned", "scannedCalls", "scannedEvents", "windowFull"},
    /// "coverage": {...}, "stats": {"calls", "fetches", "open", "p50", "p95", "samples", "sources", "errors",
    /// "timeouts", "targetingLost", "durations": [[duration, source, trace, placement]]}}`.
    public var jsonValue: JSONValue {
        let counts: [String: JSONValue] = [
            "matched": .number(Double(matched)), "returned": .number(Double(calls.count)),
            "scannedCalls": .number(Double(coverage.calls)), "scannedEvents": .number(Double(coverage.events)),
            "windowFull": .bool(!coverage.complete),
        ]
        var stats = totals.jsonObject
        stats["durations"] = .array(durations.map {
            [.number($0.duration), .string($0.source), .string($0.trace), $0.placement.map(JSONValue.string) ?? .null]
        })
        return ["calls": .array(calls.map(\.jsonValue)), "counts": .object(counts), "coverage": coverage.jsonValue,
                "stats": .object(stats)]
    }
}

extension CallTotals {
    /// `{"calls", "fetches", "open", "p50", "p95", "samples", "sources", "errors", "timeouts", "targetingLost"}`;
    /// p50/p95 are null without samples.
    public var jsonValue: JSONValue { .object(jsonObject) }

    /// The members of `jsonValue`.
    public var jsonObject: [String: JSONValue] {
        ["calls": .number(Double(calls)), "fetches": .number(Double(fetches)), "open": .number(Double(open)),
         "p50": duration.p50.map(JSONValue.number) ?? .null, "p95": duration.p95.map(JSONValue.number) ?? .null,
         "samples": .number(Double(duration.samples)), "sources": .object(sources.mapValues { .number(Double($0)) }),
         "errors": .number(Double(errors)), "timeouts": .number(Double(timeouts)), "targetingLost": .number(Double(targetingLost))]
    }
}

extension CallQuery.Placements {
    /// The body of `GET /api/placements`: `{"run", "placements": [...], "totals": {...}, "counts": {"matched",
    /// "windowFull"}, "coverage": {...}}`; `totals` are those of `GET /api/calls`'s `stats` for the same filter.
    public var jsonValue: JSONValue {
        ["run": run.map(JSONValue.string) ?? .null, "placements": .array(placements.map(\.jsonValue)),
         "totals": totals.jsonValue,
         "counts": ["matched": .number(Double(matched)), "windowFull": .bool(!coverage.complete)],
         "coverage": coverage.jsonValue]
    }
}

extension RunSummary {
    /// The JSON object of `/api/runs`: `{"id","kind","firstTs","lastTs","events","fetches","errors"}`
    /// with timestamps as ISO 8601 strings, and `"stored": true` for a run from the archive.
    public var jsonValue: JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(id), "kind": .string(kind.rawValue), "firstTs": .string(ISO8601.format(firstTs)),
            "lastTs": .string(ISO8601.format(lastTs)), "events": .number(Double(events)),
            "fetches": .number(Double(fetches)), "errors": .number(Double(errors)),
        ]
        if stored { o["stored"] = true }
        return .object(o)
    }
}

extension TestRun {
    /// The members `GET /api/runs` adds to a test run: `{"test","invocation","status","duration","failures","failureCount"}`.
    var jsonMembers: [String: JSONValue] {
        ["test": .string(test), "invocation": .string(invocation), "status": .string(status.rawValue),
         "duration": duration.map(JSONValue.number) ?? .null, "failures": .array(failures.map(JSONValue.string)),
         "failureCount": .number(Double(failureCount)), "testStart": .string(ISO8601.format(start))]
    }
}

extension TestInvocationSummary {
    /// `{"id","start","lastTs","host","revision","tests","passed","failed","skipped","running"}`.
    public var jsonValue: JSONValue {
        ["id": .string(id), "start": .string(ISO8601.format(start)), "lastTs": .string(ISO8601.format(lastTs)),
         "host": host.map(JSONValue.string) ?? .null, "revision": revision.map(JSONValue.string) ?? .null,
         "tests": .number(Double(tests)), "passed": .number(Double(passed)), "failed": .number(Double(failed)),
         "skipped": .number(Double(skipped)), "running": .number(Double(running))]
    }
}

extension RunPage {
    /// `GET /api/runs`: `{"runs": [...], "next": cursor|null, "matched", "total", "invocations": [...]}`;
    /// a test run's object carries its verdict (``TestRun``), a simulation's the scalar fields in `extra`.
    func jsonValue(extra: [String: [String: JSONValue]]) -> JSONValue {
        let runs: [JSONValue] = rows.map { row in
            guard case .object(var o) = row.summary.jsonValue else { return row.summary.jsonValue }
            if let test = row.test { o.merge(test.jsonMembers) { _, new in new } }
            if let fields = extra[row.summary.id] { o.merge(fields) { old, _ in old } }
            return .object(o)
        }
        return ["runs": .array(runs), "next": next.map(JSONValue.string) ?? .null, "matched": .number(Double(matched)),
                "total": .number(Double(total)), "invocations": .array(invocations.map(\.jsonValue))]
    }
}

extension RunDetail {
    /// `GET /api/runs/{id}`: `{"run": <RunSummary>, "placements": [...], "coverage": {...}, "eventsByName": {...}}`,
    /// with the placements of `placements` (the read model's, over the run's events).
    public func jsonValue(placements: CallQuery.Placements) -> JSONValue {
        ["run": summary.jsonValue, "placements": .array(placements.placements.map(\.jsonValue)),
         "coverage": placements.coverage.jsonValue,
         "eventsByName": .object(eventsByName.mapValues { .number(Double($0)) })]
    }
}
