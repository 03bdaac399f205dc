import ConsoleSink
import FlowEvents
import FlowFetch
import FlowJSON
import Synchronization
import TestSupport
import Testing

func envelope(_ name: EventName, t: Double, run: String = "live", placement: String? = "main_paywall",
              attrs: EventAttributes = [:]) -> Envelope {
    Envelope(seq: 1, ts: 0, t: t, run: run, trace: TraceID(high: 1, low: 1), span: SpanID(raw: 1), name: name,
             placement: placement, attrs: attrs)
}

final class Captured: Sendable {
    let text = Mutex("")
    var writer: @Sendable (String) -> Void { { s in self.text.withLock { $0 += s } } }
    var value: String { text.withLock { $0 } }
}

@Suite("ConsoleSink")
struct ConsoleSinkTests {
    @Test("lines read as a timeline: time, run unless live, placement, name, sorted attrs")
    func lines() {
        let out = Captured()
        let sink = ConsoleSink(color: .never, isTerminal: false, writer: out.writer)
        sink.consume([
            envelope(.timeout, t: 4.5, attrs: ["stage": "targeted", "budget": 4.5, "elapsed": 4.5]),
            envelope(.cacheMiss, t: 0.0123, run: "test:checkout", placement: nil),
            envelope(.fetchEnd, t: 12.25, attrs: ["source": "network", "variation": "a b", "targetingLost": false, "duration": 0.1234567]),
        ])
        #expect(out.value == """
              4.500s  main_paywall  timeout  budget=4.5 elapsed=4.5 stage=targeted
              0.012s  [test:checkout]  -  cache.miss
             12.250s  main_paywall  fetch.end  duration=0.123457 source=network targetingLost=false variation="a b"

            """)
    }

    @Test("colour rules: auto needs a terminal and no NO_COLOR; never and always are explicit")
    func colorRules() {
        #expect(ConsoleSink.usesColor(.auto, isTerminal: true, environment: [:]))
        #expect(!ConsoleSink.usesColor(.auto, isTerminal: false, environment: [:]))
        #expect(!ConsoleSink.usesColor(.auto, isTerminal: true, environment: ["NO_COLOR": "1"]))
        #expect(ConsoleSink.usesColor(.auto, isTerminal: true, environment: ["NO_COLOR": ""]))
        #expect(!ConsoleSink.usesColor(.never, isTerminal: true, environment: [:]))
        #expect(ConsoleSink.usesColor(.always, isTerminal: false, environment: ["NO_COLOR": "1"]))
    }

    @Test("coloured output carries ANSI codes only when colour is on")
    func ansi() {
        let plain = Captured(), tty = Captured(), noColor = Captured()
        let e = envelope(.timeout, t: 1, attrs: ["stage": "default"])
        ConsoleSink(isTerminal: false, environment: [:], writer: plain.writer).consume([e])
        ConsoleSink(isTerminal: true, environment: [:], writer: tty.writer).consume([e])
        ConsoleSink(isTerminal: true, environment: ["NO_COLOR": "1"], writer: noColor.writer).consume([e])
        #expect(!plain.value.contains("\u{1B}["))
        #expect(!noColor.value.contains("\u{1B}["))
        #expect(tty.value.contains("\u{1B}[31mtimeout\u{1B}[0m"))
        #expect(plain.value == noColor.value)
    }

    @Test("config options: color and stream are checked")
    func config() throws {
        var registry = SinkRegistry()
        try registry.register(ConsoleSink.Factory())
        let sink = try registry.make(type: "console", context: SinkContext(options: ["color": "never", "stream": "stderr"], path: "$.sinks[0]"))
        #expect((sink as? ConsoleSink)?.colored == false)
        #expect(throws: JSONInputError(path: "$.sinks[0].color", message: "expected one of \"auto\", \"always\", \"never\", got a string \"yes\"")) {
            _ = try registry.make(type: "console", context: SinkContext(options: ["color": "yes"], path: "$.sinks[0]"))
        }
        #expect(throws: JSONInputError.self) {
            _ = try registry.make(type: "console", context: SinkContext(options: ["stream": 2], path: "$.sinks[0]"))
        }
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

@Suite("ConsoleSink on real descriptors", .ownThread)
struct ConsoleDescriptorTests {
    /// Reads what is available on `fd` (non-blocking after the first poll).
    func readAll(_ fd: Int32) -> String {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while poll(&pfd, 1, 200) > 0 {
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            bytes += buffer[0..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    #if os(Linux)
    @Test("auto colours on a pseudo-terminal, not on a pipe, and not on a terminal with NO_COLOR")
    func terminalDetection() throws {
        // posix_openpt & co. are not exported to Swift: open the multiplexer, unlock, ask the number.
        let master = open("/dev/ptmx", O_RDWR | O_NOCTTY)
        try #require(master >= 0)
        defer { close(master) }
        var unlock: Int32 = 0, number: Int32 = -1
        #expect(ioctl(master, 0x4004_5431 /* TIOCSPTLCK */, &unlock) == 0)
        #expect(ioctl(master, 0x8004_5430 /* TIOCGPTN */, &number) == 0)
        let slave = open("/dev/pts/\(number)", O_RDWR | O_NOCTTY)
        try #require(slave >= 0)
        defer { close(slave) }
        let e = envelope(.timeout, t: 1, attrs: ["stage": "default"])
        ConsoleSink(color: .auto, fileDescriptor: slave, environment: [:]).consume([e])
        #expect(readAll(master).contains("\u{1B}[31mtimeout"))
        ConsoleSink(color: .auto, fileDescriptor: slave, environment: ["NO_COLOR": "1"]).consume([e])
        let noColor = readAll(master)
        #expect(noColor.contains("timeout") && !noColor.contains("\u{1B}["))

        var fds: [Int32] = [0, 0]
        try #require(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let onPipe = ConsoleSink(color: .auto, fileDescriptor: fds[1], environment: [:])
        #expect(!onPipe.colored)
        onPipe.consume([e])
        #expect(readAll(fds[0]) == "  1.000s  main_paywall  timeout  stage=default\n")
    }
    #endif
}
