import FlowFetch

/// A virtual clock with a queue of things due at given times: the discrete-event core of scenario
/// runs and simulations. Items due at the same time come out in the order they were scheduled.
public struct EventQueue<Item>: ~Copyable {
    /// The heap orders small trivial entries; the items wait in `slots` (reused through `free`), so
    /// sifting never copies or retains an item.
    private var heap: [(at: EngineTime, seq: UInt64, slot: Int)] = []
    private var slots: [Item?] = []
    private var free: [Int] = []
    private var seq: UInt64 = 0
    /// The virtual time: the due time of the last item taken.
    public private(set) var now = EngineTime.zero

    public init() {}

    public var isEmpty: Bool { heap.isEmpty }
    public var count: Int { heap.count }

    /// Empties the queue and sets the clock back to 0, keeping its storage for the next run.
    public mutating func reset() {
        heap.clear()
        slots.clear()
        free.clear()
        seq = 0
        now = .zero
    }

    /// Schedules `item` at time `at` (never before now).
    public mutating func schedule(_ item: Item, at: EngineTime) {
        seq += 1
        let slot: Int
        if let reused = free.popLast() {
            slot = reused
            slots[slot] = item
        } else {
            slot = slots.count
            slots.append(item)
        }
        heap.append((max(at, now), seq, slot))
        var i = heap.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            guard less(i, parent) else { break }
            heap.swapAt(i, parent)
            i = parent
        }
    }

    /// Takes the next item, advancing the clock to its time.
    public mutating func next() -> Item? {
        guard !heap.isEmpty else { return nil }
        heap.swapAt(0, heap.count - 1)
        let top = heap.removeLast()
        var i = 0
        while true {
            let l = 2 * i + 1, r = l + 1
            var m = i
            if l < heap.count, less(l, m) { m = l }
            if r < heap.count, less(r, m) { m = r }
            guard m != i else { break }
            heap.swapAt(i, m)
            i = m
        }
        now = top.at
        let item = slots[top.slot].take()
        free.append(top.slot)
        return item
    }

    private func less(_ a: Int, _ b: Int) -> Bool {
        heap[a].at < heap[b].at || (heap[a].at == heap[b].at && heap[a].seq < heap[b].seq)
    }
}

/// Deterministic ids for virtual runs (SplitMix64).
public struct SeededIDs: Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= splitMix64Gamma
        return mix64(state)
    }
}
