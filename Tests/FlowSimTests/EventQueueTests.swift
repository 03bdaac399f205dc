import FlowFetch
import FlowSim
import Testing

@Suite("The virtual clock's event queue")
struct EventQueueTests {
    @Test("items come out by time, ties in scheduling order, interleaved with new ones; reset starts over")
    func ordersLikeASortedList() {
        var queue = EventQueue<String>()
        var model: [(at: EngineTime, seq: Int, item: String)] = []
        var state: UInt64 = 99
        func draw(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        var seq = 0
        for round in 0..<2 {
            for step in 0..<6_000 {
                if draw(3) < 2 || model.isEmpty {
                    // Coarse times, so many items share one (ties must keep their order).
                    let at = queue.now + EngineTime(microseconds: Int64(draw(5)) * 1_000_000)
                    seq += 1
                    queue.schedule("item-\(round)-\(step)", at: at)
                    model.append((at, seq, "item-\(round)-\(step)"))
                } else {
                    let k = model.indices.min { (model[$0].at, model[$0].seq) < (model[$1].at, model[$1].seq) }!
                    let expected = model.remove(at: k)
                    let got = queue.next()
                    guard got == expected.item, queue.now == expected.at else {
                        Issue.record("step \(step): got \(String(describing: got)) at \(queue.now), expected \(expected.item) at \(expected.at)")
                        return
                    }
                }
                #expect(queue.count == model.count)
            }
            queue.reset()
            model.removeAll()
            #expect(queue.isEmpty && queue.now == 0 && queue.next() == nil)
        }
    }

    @Test("an item scheduled in the past is due now, not earlier")
    func neverBeforeNow() {
        var queue = EventQueue<Int>()
        queue.schedule(1, at: 5)
        _ = queue.next()
        queue.schedule(2, at: 1)
        #expect(queue.next() == 2 && queue.now == 5)
    }
}
