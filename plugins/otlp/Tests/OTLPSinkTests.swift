import FlowEvents
import FlowFetch
import FlowJSON
import Foundation
@testable import OTLPSink
import Synchronization
import TestSupport
import Testing

func nanos(_ offset: Double) -> UInt64 { unixNanos(1_796_000_000.0 + offset) }

@Suite("OTLP trace assembly", .ownThread)
struct OTLPTraceBuilderTests {
    @Test("a realistic stream becomes one trace per call with request spans and span events")
    func realisticStream() throws {
        var builder = OTLPTraceBuilder()
        var spans: [OTLPSpan] = []
        var completedAt: [String: UInt64] = [:]
        for e in sampleStream() {
            let out = builder.add(e, now: 0)
            for span in out { completedAt[span.traceId] = e.seq }
            spans += out
        }
        #expect(builder.openTraceCount == 0)
        #expect(builder.incompleteCount == 0)
        #expect(Set(spans.map(\.traceId)) == [getFlowTrace.hex, preloadTrace.hex, failingTrace.hex])
        // Each trace left when its root ended: the preload first, then getFlow, then the failing call.
        #expect(spans.map(\.traceId).first == preloadTrace.hex)

        // getFlow main_paywall: root + targeted (timed out) + default request.
        let g = spans.filter { $0.traceId == getFlowTrace.hex }
        #expect(g.map(\.spanId) == [getFlowRoot.hex, targetedRequest.hex, defaultRequest.hex])
        let root = g[0]
        #expect(root.name == "getFlow main_paywall")
        #expect(root.parentSpanId == nil)
        #expect(root.kind == .internal)
        #expect(root.startTimeUnixNano == nanos(0))
        #expect(root.endTimeUnixNano == nanos(4.7))
        #expect(root.status == .unset)
        #expect(root.attributes["policy"] == "reloadRevalidatingCacheData")
        #expect(root.attributes["source"] == "network")
        #expect(root.attributes["targetingLost"] == true)
        #expect(root.attributes["placement"] == "main_paywall")
        #expect(root.attributes["flowscope.run"] == "live")
        #expect(root.events.map(\.name) == ["cache.miss", "fallback", "cache.stored"])
        #expect(root.events[1].attributes == ["to": "defaultAudience", "reason": "timeout", "placement": "main_paywall"])
        #expect(root.events[1].timeUnixNano == nanos(4.501))

        let targeted = g[1]
        #expect(targeted.name == "request targeted")
        #expect(targeted.kind == .client)
        #expect(targeted.parentSpanId == getFlowRoot.hex)
        #expect(targeted.startTimeUnixNano == nanos(0.001))
        #expect(targeted.endTimeUnixNano == nanos(4.501))
        #expect(targeted.status == .error("timeout"))
        #expect(targeted.events.map(\.name) == ["timeout"])
        #expect(targeted.events[0].attributes["budget"] == 4.5)
        #expect(g[2].name == "request default")
        #expect(g[2].parentSpanId == getFlowRoot.hex)
        #expect(g[2].status == .unset)
        #expect(g[2].attributes["status"] == 200)

        // The preload: root + 3 targeted + 1 default request, the failing placement an error.
        let p = spans.filter { $0.traceId == preloadTrace.hex }
        #expect(p.map(\.spanId) == [preloadRoot.hex] + preloadRequests.map(\.hex))
        #expect(p[0].name == "preloadFlows")
        #expect(p[0].parentSpanId == nil)
        #expect(p[0].status == .error("failed: promo=2003"))
        #expect(p[0].events.map(\.name) == ["fallback"])
        #expect(p[0].events[0].attributes["placement"] == "promo")
        #expect(p.dropFirst().allSatisfy { $0.parentSpanId == preloadRoot.hex && $0.kind == .client })
        #expect(p.dropFirst().map(\.name) == ["request targeted", "request targeted", "request targeted", "request default"])
        #expect(p.dropFirst().map(\.status) == [.unset, .unset, .error("server"), .error("client")])
        #expect(p[1].attributes["placement"] == "onboarding")

        // The failing getFlow: status ERROR from fetch.end's errorCode.
        let f = spans.filter { $0.traceId == failingTrace.hex }
        #expect(f.map(\.name) == ["getFlow onboarding", "request targeted"])
        #expect(f[0].status == .error("2003"))
    }

    @Test("every span of a call whose events carry a session and profile has session.id and flowscope.profile; a call without them has neither")
    func sessionAttributes() throws {
        var builder = OTLPTraceBuilder()
        let session = SessionID(hex: "0123456789abcdef")!
        var spans: [OTLPSpan] = []
        for var e in sampleStream() {
            if e.trace == getFlowTrace { e.session = session; e.profile = "a1b2c3d4e5f60718" }
            spans += builder.add(e, now: 0)
        }
        let g = spans.filter { $0.traceId == getFlowTrace.hex }
        #expect(g.count == 3)
        #expect(g.allSatisfy { $0.attributes["session.id"] == "0123456789abcdef" && $0.attributes["flowscope.profile"] == "a1b2c3d4e5f60718" })
        let others = spans.filter { $0.traceId != getFlowTrace.hex }
        #expect(!others.isEmpty)
        #expect(others.allSatisfy { $0.attributes["session.id"] == nil && $0.attributes["flowscope.profile"] == nil })
    }

    @Test("a trace whose root never ends is exported after the timeout, marked incomplete")
    func timeout() throws {
        var builder = OTLPTraceBuilder(traceTimeout: 120)
        let events = sampleStream().filter { $0.trace == getFlowTrace && $0.name != .fetchEnd }
        for e in events { #expect(builder.add(e, now: 1000).isEmpty) }
        #expect(builder.expire(now: 1119).isEmpty)
        let spans = builder.expire(now: 1120)
        #expect(spans.count == 3)
        #expect(spans[0].spanId == getFlowRoot.hex)
        #expect(spans[0].attributes["flowscope.incomplete"] == true)
        #expect(spans[0].endTimeUnixNano == nanos(4.7))
        #expect(builder.incompleteCount == 1)
        #expect(builder.openTraceCount == 0)
    }

    @Test("a full open-trace table exports its oldest trace early and counts it")
    func overflow() throws {
        var builder = OTLPTraceBuilder(maxOpenTraces: 2)
        let traces = (1...3).map { TraceID(high: 0, low: UInt64($0)) }
        var out: [OTLPSpan] = []
        for (i, trace) in traces.enumerated() {
            out += builder.add(Envelope(seq: UInt64(i + 1), ts: 1_796_000_000 + Double(i), t: 0, run: "live", trace: trace,
                                        span: SpanID(raw: 100 + UInt64(i)), name: .fetchStart, placement: "p",
                                        attrs: ["call": "getFlow"]), now: 0)
        }
        #expect(out.map(\.traceId) == [traces[0].hex])
        #expect(builder.overflowCount == 1)
        #expect(builder.openTraceCount == 2)
        #expect(builder.drain().map(\.traceId) == [traces[1].hex, traces[2].hex])
    }

    @Test("events after the root ended are dropped, except new spans such as a background prefetch")
    func lateEvents() throws {
        var builder = OTLPTraceBuilder()
        for e in sampleStream() where e.trace == getFlowTrace { _ = builder.add(e, now: 0) }
        let prefetch = SpanID(trace: getFlowTrace, index: 9)
        func late(_ name: EventName, _ span: SpanID, _ attrs: EventAttributes) -> Envelope {
            Envelope(seq: 100, ts: 1_796_000_006, t: 6, run: "live", trace: getFlowTrace, span: span, name: name,
                     placement: "main_paywall", attrs: attrs)
        }
        #expect(builder.add(late(.cacheHit, getFlowRoot, ["layer": "memory"]), now: 0).isEmpty)
        #expect(builder.lateEventCount == 1)
        #expect(builder.add(late(.assetsPrefetchStart, prefetch, ["count": 3]), now: 0).isEmpty)
        let spans = builder.add(late(.assetsPrefetchEnd, prefetch, ["bytes": 900, "failed": 0, "duration": 1.5]), now: 0)
        #expect(spans.count == 1)
        #expect(spans.first?.name == "assets.prefetch")
        #expect(spans.first?.parentSpanId == getFlowRoot.hex)
        #expect(spans.first?.attributes["count"] == 3)
    }

    @Test("spans encode as OTLP JSON: hex ids, string nanos, integer enums, typed AnyValues")
    func encoding() throws {
        let span = OTLPSpan(traceId: getFlowTrace.hex, spanId: targetedRequest.hex, parentSpanId: getFlowRoot.hex,
                            name: "request targeted", kind: .client, startTimeUnixNano: 1_796_000_000_000_001_000,
                            endTimeUnixNano: 1_796_000_004_500_001_000,
                            attributes: ["s": "x", "i": 3, "d": 4.5, "b": false, "n": .null, "a": [1, "y"], "o": ["k": true]],
                            events: [.init(name: "timeout", timeUnixNano: 7, attributes: ["stage": "targeted"])],
                            status: .error("timeout"))
        var text = ""
        OTLPEncoding.writeSpan(span, to: &text)
        #expect(text == "{\"traceId\":\"4bf92f3577b34da6a3ce929d0e0e4736\",\"spanId\":\"\(targetedRequest.hex)\","
            + "\"parentSpanId\":\"\(getFlowRoot.hex)\",\"name\":\"request targeted\",\"kind\":3,"
            + "\"startTimeUnixNano\":\"1796000000000001000\",\"endTimeUnixNano\":\"1796000004500001000\",\"attributes\":["
            + "{\"key\":\"a\",\"value\":{\"arrayValue\":{\"values\":[{\"intValue\":\"1\"},{\"stringValue\":\"y\"}]}}},"
            + "{\"key\":\"b\",\"value\":{\"boolValue\":false}},{\"key\":\"d\",\"value\":{\"doubleValue\":4.5}},"
            + "{\"key\":\"i\",\"value\":{\"intValue\":\"3\"}},"
            + "{\"key\":\"o\",\"value\":{\"kvlistValue\":{\"values\":[{\"key\":\"k\",\"value\":{\"boolValue\":true}}]}}},"
            + "{\"key\":\"s\",\"value\":{\"stringValue\":\"x\"}}],"
            + "\"events\":[{\"timeUnixNano\":\"7\",\"name\":\"timeout\",\"attributes\":[{\"key\":\"stage\",\"value\":{\"stringValue\":\"targeted\"}}]}],"
            + "\"status\":{\"code\":2,\"message\":\"timeout\"}}")
        let body = OTLPEncoding.exportRequest([span], serviceVersion: "1.2.3")
        #expect(body.hasPrefix("{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\",\"value\":{\"stringValue\":\"flowscope\"}},"
            + "{\"key\":\"service.version\",\"value\":{\"stringValue\":\"1.2.3\"}}]},\"scopeSpans\":[{\"scope\":{\"name\":\"flowscope\""))
    }
}

@Suite("OTLP sink export", .ownThread)
struct OTLPSinkTests {
    /// Writes the realistic stream through a file-mode sink and returns the file's path.
    func exportToFile(_ dir: String, batchSize: Int) throws -> (path: String, sink: OTLPSink) {
        let path = dir + "/out/traces.jsonl"
        var options = OTLPSink.Options(destination: .file(path))
        options.batchSize = batchSize
        options.flushInterval = 60
        let sink = try OTLPSink(options: options)
        let stream = sampleStream()
        sink.consume(Array(stream[0..<10]))
        sink.consume(Array(stream[10...]))
        sink.flush()
        return (path, sink)
    }

    @Test("file mode writes one ExportTraceServiceRequest per line, batched")
    func fileMode() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (path, sink) = try exportToFile(dir, batchSize: 4)
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        var spanIds: [String] = []
        for line in lines {
            let doc = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            let resourceSpans = try #require(doc["resourceSpans"] as? [[String: Any]])
            let scopeSpans = try #require(resourceSpans.first?["scopeSpans"] as? [[String: Any]])
            let spans = try #require(scopeSpans.first?["spans"] as? [[String: Any]])
            #expect(spans.count <= 4)
            spanIds += spans.compactMap { $0["spanId"] as? String }
        }
        #expect(spanIds.count == 10)
        #expect(Set(spanIds).count == 10)
        #expect(spanIds.contains(getFlowRoot.hex))
        #expect(lines.count >= 3)
        let stats = sink.stats
        #expect(stats.exportedSpans == 10)
        #expect(stats.requests == lines.count)
        #expect(stats.failedSpans == 0 && stats.droppedSpans == 0 && stats.queuedSpans == 0)
    }

    @Test("the file-mode output is accepted by the official OTLP protobuf definitions")
    func officialCheck() throws {
        let python = packageRoot + "/.build/pyenv/bin/python"
        let script = packageRoot + "/plugins/otlp/Tests/check_otlp_json.py"
        try #require(FileManager.default.isExecutableFile(atPath: python),
                     "missing \(python): run `bash scripts/setup.sh test` (make test does) to install opentelemetry-proto")
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (path, sink) = try exportToFile(dir, batchSize: 3)
        sink.close()
        let result = try runProgram(python, [script, path])
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("ok: ") && result.output.contains(" 10 spans, 5 events"), "\(result.output)")

        // The check can fail: base64 ids (the mistake some exporters make) are refused.
        let good = try String(contentsOfFile: path, encoding: .utf8)
        let bad = dir + "/base64.jsonl"
        let hex = getFlowRoot.hex
        let base64 = Data((0..<8).map { i in UInt8(hex.dropFirst(2 * i).prefix(2), radix: 16)! }).base64EncodedString()
        try good.replacingOccurrences(of: "\"spanId\":\"\(hex)\"", with: "\"spanId\":\"\(base64)\"")
            .write(toFile: bad, atomically: true, encoding: .utf8)
        let refused = try runProgram(python, [script, bad])
        #expect(refused.status == 1, "\(refused.output)")
        #expect(refused.output.contains("lowercase hex"), "\(refused.output)")

        // And an unknown field is refused by the strict parse.
        let unknown = dir + "/unknown.jsonl"
        try good.replacingOccurrences(of: "\"kind\":3", with: "\"kind\":3,\"spanKind\":3")
            .write(toFile: unknown, atomically: true, encoding: .utf8)
        let strict = try runProgram(python, [script, unknown])
        #expect(strict.status == 1, "\(strict.output)")
        #expect(strict.output.contains("rejected by ExportTraceServiceRequest"), "\(strict.output)")
    }

    @Test("a 503, then a dropped connection, then 200: retried with backoff, headers sent, nothing lost")
    func retries() throws {
        let collector = try StubCollector(script: [.status(503), .close, .status(200)])
        defer { collector.stop() }
        var options = OTLPSink.Options(destination: .endpoint(collector.url))
        options.headers = ["X-Api-Key": "secret-123"]
        options.initialBackoff = 0.05
        options.timeout = 5
        options.flushInterval = 60
        let sink = try OTLPSink(options: options)
        sink.consume(sampleStream())
        sink.flush()
        let received = collector.received
        #expect(received.count == 3)
        #expect(Set(received.map(\.body)).count == 1, "every attempt sends the same body")
        #expect(received.allSatisfy { $0.head.hasPrefix("POST /v1/traces HTTP/1.1") })
        #expect(received.allSatisfy { $0.head.lowercased().contains("x-api-key: secret-123") })
        #expect(received.allSatisfy { $0.head.lowercased().contains("content-type: application/json") })
        if received.count == 3 {
            #expect(received[1].at - received[0].at >= 0.035, "first backoff about 0.05 s")
            #expect(received[2].at - received[1].at >= 0.07, "second backoff about 0.1 s")
        }
        let stats = sink.stats
        #expect(stats.exportedSpans == 10)
        #expect(stats.retries == 2)
        #expect(stats.requests == 1)
        #expect(stats.failedSpans == 0)
    }

    @Test("Retry-After from a 429 is honoured over a shorter backoff")
    func retryAfter() throws {
        let collector = try StubCollector(script: [.status(429, retryAfter: "1")])
        defer { collector.stop() }
        var options = OTLPSink.Options(destination: .endpoint(collector.url))
        options.initialBackoff = 0.01
        options.flushInterval = 60
        let sink = try OTLPSink(options: options)
        sink.consume(sampleStream())
        sink.flush()
        let received = collector.received
        #expect(received.count == 2)
        if received.count == 2 { #expect(received[1].at - received[0].at >= 0.9) }
        #expect(sink.stats.exportedSpans == 10)
    }

    @Test("a collector that cannot be reached: retries exhausted, spans counted as failed, the pipeline never waits")
    func transportFailure() throws {
        // A port that was just free: nothing listens there.
        let probe = try StubCollector(script: [])
        let url = probe.url
        probe.stop()
        var options = OTLPSink.Options(destination: .endpoint(url))
        options.maxRetries = 2
        options.initialBackoff = 0.05
        options.flushInterval = 60
        let sink = try OTLPSink(options: options)
        let start = Date()
        sink.consume(sampleStream())
        #expect(Date().timeIntervalSince(start) < 0.5, "consume only assembles spans")
        sink.flush()
        let stats = sink.stats
        #expect(stats.exportedSpans == 0)
        #expect(stats.failedSpans == 10)
        #expect(stats.retries == 2)
        #expect(stats.lastError?.contains(url.absoluteString) == true, "\(stats.lastError ?? "")")
        #expect(stats.lastError?.contains("gave up after 3 attempts") == true, "\(stats.lastError ?? "")")
        #expect(stats.lastError == "\(url.absoluteString): cannot connect (connection refused) (gave up after 3 attempts)",
                "\(stats.lastError ?? "")")
    }

    @Test("a collector that never answers: lastError and health say the export timed out after the timeout option")
    func exportTimeout() throws {
        let collector = try StubCollector(script: [.hang])
        defer { collector.stop() }
        var options = OTLPSink.Options(destination: .endpoint(collector.url))
        options.timeout = 0.5
        options.maxRetries = 0
        options.flushInterval = 60
        let sink = try OTLPSink(options: options)
        let start = Date()
        sink.consume(sampleStream())
        sink.flush()
        #expect(Date().timeIntervalSince(start) < 5, "the request is cut after about 0.5 s")
        // The collector reads what was sent on its own thread, which a loaded machine may run after the
        // sink gave up: the request is still in the socket, so it arrives.
        let deadline = Date().addingTimeInterval(5)
        while collector.received.isEmpty && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(collector.received.count == 1)
        let expected = "\(collector.url.absoluteString): timed out after 0.5 s (gave up after 1 attempts)"
        #expect(sink.stats.lastError == expected, "\(sink.stats.lastError ?? "")")
        #expect(sink.stats.failedSpans == 10)
        let health = sink.health
        #expect(!health.up)
        #expect(health.lastError == expected)
    }

    @Test("transport errors read in plain words; unknown ones keep Foundation's description")
    func transportErrorWords() {
        func words(_ code: URLError.Code) -> String { OTLPTransport.describe(URLError(code), timeout: 10) }
        #expect(words(.timedOut) == "timed out after 10 s")
        #expect(OTLPTransport.describe(URLError(.timedOut), timeout: 2.5) == "timed out after 2.5 s")
        #expect(words(.cannotConnectToHost) == "cannot connect (connection refused)")
        #expect(words(.cannotFindHost) == "host not found")
        #expect(words(.dnsLookupFailed) == "host not found")
        #expect(words(.serverCertificateUntrusted) == "TLS: the server's certificate is not trusted")
        #expect(words(.serverCertificateHasUnknownRoot) == "TLS: the server's certificate is not trusted")
        #expect(words(.secureConnectionFailed) == "TLS: secure connection failed (often an untrusted certificate)")
        #expect(words(.networkConnectionLost) == "connection closed before an answer")
        #expect(words(.badURL) == URLError(.badURL).localizedDescription)
        #expect(OTLPTransport.describe(POSIXError(.EIO), timeout: 10) == POSIXError(.EIO).localizedDescription)
    }

    @Test("export requests carry User-Agent flowscope/<FlowScope's version>, set by the factory from the sink context")
    func userAgent() throws {
        let collector = try StubCollector(script: [])
        defer { collector.stop() }
        let factory = OTLPSink.Factory()
        let context = SinkContext(name: "otlp", options: ["endpoint": .string(collector.url.absoluteString), "flushInterval": 60],
                                  path: "$.sinks[0]", version: "9.8.7")
        let options = try factory.options(from: context)
        #expect(options.userAgent == "flowscope/9.8.7")
        let sink = try factory.makeSink(options, context: context)
        sink.consume(sampleStream())
        sink.flush()
        sink.close()
        let heads = collector.received.map { $0.head.lowercased() }
        #expect(!heads.isEmpty)
        for head in heads {
            let agents = head.split(separator: "\r\n").filter { $0.hasPrefix("user-agent:") }
            #expect(agents == ["user-agent: flowscope/9.8.7"], "\(head)")
        }

        // A User-Agent in `headers` replaces it.
        let custom = try StubCollector(script: [])
        defer { custom.stop() }
        var withHeader = try factory.options(from: SinkContext(options: ["endpoint": .string(custom.url.absoluteString), "flushInterval": 60,
                                                                         "headers": ["User-Agent": "custom/1"]], version: "9.8.7"))
        withHeader.maxRetries = 0
        let other = try factory.makeSink(withHeader, context: context)
        other.consume(sampleStream())
        other.close()
        #expect(custom.received.map { $0.head.lowercased().split(separator: "\r\n").filter { $0.hasPrefix("user-agent:") } }
                == [["user-agent: custom/1"]])
    }

    @Test("a 400 is not retried: the batch is dropped and counted")
    func rejected() throws {
        let collector = try StubCollector(script: [.status(400)])
        defer { collector.stop() }
        var options = OTLPSink.Options(destination: .endpoint(collector.url))
        options.flushInterval = 60
        let sink = try OTLPSink(options: options)
        sink.consume(sampleStream())
        sink.flush()
        #expect(collector.received.count == 1)
        #expect(sink.stats.failedSpans == 10)
        #expect(sink.stats.retries == 0)
    }

    @Test("the queue is bounded: the oldest spans are dropped and counted")
    func boundedQueue() throws {
        let collector = try StubCollector(script: [])
        defer { collector.stop() }
        var options = OTLPSink.Options(destination: .endpoint(collector.url))
        options.maxQueueSize = 5
        options.batchSize = 100
        options.flushInterval = 60
        let sink = try OTLPSink(options: options)
        sink.consume(sampleStream())
        sink.flush()
        let stats = sink.stats
        // One consume queues all ten spans at once: the five oldest (the preload) go.
        #expect(stats.droppedSpans == 5)
        #expect(stats.exportedSpans == 5)
        #expect(collector.received.count == 1)
        #expect(collector.received.first?.body.contains(preloadRoot.hex) == false)
    }

    @Test("an unfinished trace leaves after traceTimeout by the sink's clock; finish() exports the rest")
    func incompleteTraces() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let clock = Mutex(1000.0)
        var options = OTLPSink.Options(destination: .file(dir + "/t.jsonl"))
        options.traceTimeout = 30
        options.flushInterval = 60
        let sink = try OTLPSink(options: options, now: { clock.withLock { $0 } })
        let stream = sampleStream()
        sink.consume(stream.filter { $0.trace == getFlowTrace && $0.name != .fetchEnd })
        clock.withLock { $0 = 1020 }
        sink.consume(stream.filter { $0.trace == failingTrace && $0.name != .fetchEnd })
        sink.flush()
        #expect(sink.stats.exportedSpans == 0)
        #expect(sink.stats.openTraces == 2)
        clock.withLock { $0 = 1031 }
        sink.flush()
        #expect(sink.stats.exportedSpans == 3)
        #expect(sink.stats.incompleteTraces == 1)
        #expect(sink.stats.openTraces == 1)
        sink.close()
        #expect(sink.stats.exportedSpans == 5)
        #expect(sink.stats.openTraces == 0)
        let text = try String(contentsOfFile: dir + "/t.jsonl", encoding: .utf8)
        #expect(text.contains("\"flowscope.incomplete\",\"value\":{\"boolValue\":true}"))
    }

    @Test("a relative file option resolves against the config file's directory, an absolute one stays as it is")
    func fileRelativeToTheConfig() throws {
        let factory = OTLPSink.Factory()
        func destination(_ file: String, configDirectory: String?) throws -> OTLPSink.Destination {
            try factory.options(from: SinkContext(options: ["file": .string(file)], path: "$.sinks[0]",
                                                  configDirectory: configDirectory)).destination
        }
        #expect(try destination("traces/otlp.jsonl", configDirectory: "/etc/flowscope") == .file("/etc/flowscope/traces/otlp.jsonl"))
        #expect(try destination("/var/otlp.jsonl", configDirectory: "/etc/flowscope") == .file("/var/otlp.jsonl"))
        #expect(try destination("otlp.jsonl", configDirectory: nil) == .file("otlp.jsonl"))
    }

    @Test("the otlp entry of config/flowscope.json5 is accepted")
    func shippedConfig() throws {
        let text = try String(contentsOfFile: packageRoot + "/config/flowscope.json5", encoding: .utf8)
        let sinks = try #require(try JSON5.parse(text)["sinks"]?.arrayValue)
        let index = try #require(sinks.firstIndex { $0["type"] == "otlp" })
        let options = try OTLPSink.Options(json: try #require(sinks[index].objectValue), path: "$.sinks[\(index)]")
        #expect(options.destination == .endpoint(URL(string: try #require(sinks[index]["endpoint"]?.stringValue))!))
    }

    @Test("options are read from a config object, and bad ones name their JSON path")
    func options() throws {
        let o = try OTLPSink.Options(json: ["type": "otlp", "endpoint": "https://collector.example:4318/v1/traces",
                                            "headers": ["Authorization": "Bearer x"], "batchSize": 100, "flushInterval": 2,
                                            "timeout": 3],
                                     path: "$.sinks[3]")
        #expect(o.destination == .endpoint(URL(string: "https://collector.example:4318/v1/traces")!))
        #expect(o.headers == ["Authorization": "Bearer x"])
        #expect(o.batchSize == 100 && o.flushInterval == 2 && o.timeout == 3)
        #expect(try OTLPSink.Options(json: ["file": "t.jsonl"]).destination == .file("t.jsonl"))
        func path(_ json: [String: JSONValue]) -> String? {
            do { _ = try OTLPSink.Options(json: json, path: "$.sinks[3]"); return nil } catch { return error.path }
        }
        #expect(path(["endpoint": "ftp://x/v1/traces"]) == "$.sinks[3].endpoint")
        #expect(path([:]) == "$.sinks[3]")
        #expect(path(["endpoint": "http://a/v1/traces", "file": "x"]) == "$.sinks[3].file")
        #expect(path(["file": "x", "batchSize": 0]) == "$.sinks[3].batchSize")
        #expect(path(["file": "x", "headers": ["A": 1]]) == "$.sinks[3].headers.A")
        #expect(path(["file": "x", "flushInterval": "5s"]) == "$.sinks[3].flushInterval")
        #expect(path(["file": "x", "endpiont": "y"]) == "$.sinks[3].endpiont")
        #expect(path(["file": "x", "headers": ["X-Api-Key": false]]) == "$.sinks[3].headers[\"X-Api-Key\"]")
    }

    /// `timeout: 1e308` passed check-config and crashed `serve` (a trap in FoundationNetworking, which
    /// turns a request's timeout into Int milliseconds) at the first export.
    @Test("every seconds option is at most 10^9, and the error names it", arguments: [
        "timeout", "flushInterval", "traceTimeout", "initialBackoff", "maxBackoff", "flushTimeout",
    ])
    func secondsBound(_ key: String) throws {
        func options(_ seconds: Double) throws(JSONInputError) -> OTLPSink.Options {
            var json: [String: JSONValue] = ["endpoint": "http://127.0.0.1:4318/v1/traces"]
            json[key] = .number(seconds)
            return try OTLPSink.Options(json: json, path: "$.sinks[2]")
        }
        _ = try options(1_000_000_000)
        for tooLong in [1_000_000_000.5, 1e16, 1e308] {
            do {
                _ = try options(tooLong)
                Issue.record("\(key): \(tooLong) was accepted")
            } catch {
                #expect(error.path == "$.sinks[2].\(key)")
                #expect(error.description.contains("at most 1000000000"), "\(error)")
            }
        }
    }
}
