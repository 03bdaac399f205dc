import FlowJSON
import FlowScopeCLI
import Synchronization
import TestSupport
import Testing

@Suite("flowscope bench", .heavy)
struct BenchCommandTests {
    /// Collects what a command prints.
    final class Printed: Sendable {
        let out = Mutex("")
        let err = Mutex("")
        var output: Output {
            Output(out: { s in self.out.withLock { $0 += s } }, err: { s in self.err.withLock { $0 += s } }, isTerminal: false)
        }
    }

    @Test("bench --quick --json prints every fixed benchmark with its unit, value and baseline in the contract's shape")
    func quickJSON() async throws {
        let printed = Printed()
        let status = await CommandLine.run(["bench", "--quick", "--json"], output: printed.output)
        #expect(status == 0, "stderr: \(printed.err.withLock { $0 })")
        let doc = try JSON5.parse(printed.out.withLock { $0 })
        guard case .object(let root) = doc, root.keys.sorted() == ["benchmarks"],
              case .array(let items)? = root["benchmarks"] else {
            Issue.record("expected {\"benchmarks\": [...]}, got \(doc.jsonText)")
            return
        }
        let expected: [String: (unit: String, baseline: Bool)] = [
            "engine.getFlow.cacheHit": ("ns/op", true), "pipeline.emit": ("ns/event", false),
            "pipeline.throughput": ("events/s", false), "metrics.counter.increment": ("ns/op", true),
            "metrics.render": ("us/1000 series", false), "sim.calls": ("calls/s", false), "scenario.steps": ("steps/s", true),
            "sqlite.insert": ("events/s", true), "ingest.sqlite": ("events/s", true), "readmodel.fold": ("events/s", false),
            "api.placements": ("ms/query", true), "api.calls": ("ms/query", true),
        ]
        var seen: Set<String> = []
        for item in items {
            guard case .object(let o) = item, let name = o["name"]?.stringValue else {
                Issue.record("a benchmark without a name: \(item.jsonText)")
                continue
            }
            seen.insert(name)
            #expect(o.keys.sorted() == ["baseline", "name", "ratio", "unit", "value"], "\(name): \(item.jsonText)")
            let value = o["value"]?.numberValue ?? -1
            #expect(value > 0 && value.isFinite, "\(name) value \(value)")
            guard let want = expected[name] else { continue }
            #expect(o["unit"]?.stringValue == want.unit, "\(name) unit")
            if want.baseline {
                let baseline = o["baseline"]?.objectValue
                let b = baseline?["value"]?.numberValue ?? 0
                #expect(baseline?.keys.sorted() == ["name", "value"] && b > 0 && baseline?["name"]?.stringValue?.isEmpty == false,
                        "\(name) baseline \(o["baseline"]?.jsonText ?? "")")
                // ratio is value/baseline as printed (rounded to 4 significant digits on each side).
                let ratio = o["ratio"]?.numberValue ?? 0
                #expect(abs(ratio - value / b) <= 0.002 * ratio + 1e-9, "\(name) ratio \(ratio) vs \(value / b)")
            } else {
                #expect(o["baseline"] == .null && o["ratio"] == .null, "\(name): \(item.jsonText)")
            }
        }
        #expect(seen.isSuperset(of: expected.keys), "missing: \(Set(expected.keys).subtracting(seen).sorted())")
    }

    @Test("bench rejects an unknown flag with usage status 2")
    func badFlag() async {
        let printed = Printed()
        #expect(await CommandLine.run(["bench", "--fast"], output: printed.output) == 2)
        #expect(printed.err.withLock { $0 }.contains("--fast"))
    }

    @Test("an --only entry that is no benchmark's name or prefix is a usage error naming it and the benchmarks, before any runs")
    func unknownOnly() async {
        for only in ["nosuch", "pipeline,nosuch", "sim.calls.x"] {
            let printed = Printed()
            #expect(await CommandLine.run(["bench", "--quick", "--only", only], output: printed.output) == 2, "--only \(only)")
            let bad = only.split(separator: ",").last.map(String.init) ?? only
            let err = printed.err.withLock { $0 }
            #expect(err == "flowscope bench: --only \(bad): no benchmark is named or starts with it (benchmarks: "
                    + BenchmarkSuite.names.joined(separator: ", ") + ")\n", "\(err)")
            #expect(printed.out.withLock { $0 }.isEmpty)
        }
    }

    @Test("an empty --only entry (--only \"\", a,,b, a trailing comma) is a usage error, not every benchmark, before any runs")
    func emptyOnly() async {
        for only in ["", ",", "pipeline,,sim.calls", "pipeline,"] {
            let printed = Printed()
            #expect(await CommandLine.run(["bench", "--quick", "--only", only], output: printed.output) == 2, "--only \"\(only)\"")
            let err = printed.err.withLock { $0 }
            #expect(err == "flowscope bench: --only \"\(only)\": an empty name; expected comma-separated names or prefixes (benchmarks: "
                    + BenchmarkSuite.names.joined(separator: ", ") + ")\n", "\(err)")
            #expect(printed.out.withLock { $0 }.isEmpty)
        }
    }
}
