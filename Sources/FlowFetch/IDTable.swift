/// A hash table from the engine's ids (positive integers from one counter) to values.
///
/// The engine looks its calls, requests and timers up several times per input. `Dictionary` hashes
/// every `Int` key with seeded SipHash; these keys are dense and not chosen by anyone outside, so a
/// multiplicative (Fibonacci) hash spreads them as well at a fraction of the cost. Open addressing
/// with linear probing; removal shifts later entries back, so there are no tombstones.
struct IDTable<Value> {
    private struct Slot {
        /// 0 marks an empty slot (ids start at 1).
        var key: Int
        var value: Value?
    }
    /// One array of slots (one allocation per table).
    private var slots: [Slot]
    /// 64 minus log2 of the capacity: the hash keeps the product's top bits.
    private var shift: Int
    /// Entries stored.
    private(set) var count = 0

    /// An empty table; storage is allocated at the first insert (an engine that only answers from
    /// its cache never allocates any).
    init() {
        slots = []
        shift = 64
    }

    var isEmpty: Bool { count == 0 }

    /// The stored keys, in no particular order.
    var keysInTableOrder: [Int] { slots.lazy.map(\.key).filter { $0 != 0 } }

    private func home(_ key: Int) -> Int {
        Int(truncatingIfNeeded: (UInt64(bitPattern: Int64(key)) &* 0x9E37_79B9_7F4A_7C15) >> UInt64(shift))
    }

    /// The slot holding `key`, or nil.
    private func slot(of key: Int) -> Int? {
        guard key > 0, !slots.isEmpty else { return nil }
        let mask = slots.count - 1
        var i = home(key)
        while true {
            let k = slots[i].key
            if k == key { return i }
            if k == 0 { return nil }
            i = (i + 1) & mask
        }
    }

    subscript(key: Int) -> Value? {
        get { slot(of: key).flatMap { slots[$0].value } }
        set {
            guard let newValue else { removeValue(forKey: key); return }
            insert(key, newValue)
        }
    }

    /// Stores `value` for `key` (a positive id), replacing any earlier value.
    mutating func insert(_ key: Int, _ value: Value) {
        precondition(key > 0, "IDTable keys are positive ids")
        if (count + 1) * 4 > slots.count * 3 { grow() }
        let mask = slots.count - 1
        var i = home(key)
        while slots[i].key != 0 && slots[i].key != key { i = (i + 1) & mask }
        if slots[i].key == 0 { count += 1 }
        slots[i].key = key
        slots[i].value = value
    }

    /// Removes and returns the value for `key`, if any.
    @discardableResult
    mutating func removeValue(forKey key: Int) -> Value? {
        guard var hole = slot(of: key) else { return nil }
        let removed = slots[hole].value
        let mask = slots.count - 1
        // Backward shift: move up every later entry of the run whose home is not between the hole and it.
        var i = hole
        while true {
            i = (i + 1) & mask
            let k = slots[i].key
            if k == 0 { break }
            let h = home(k)
            let stays = hole <= i ? (hole < h && h <= i) : (hole < h || h <= i)
            if stays { continue }
            slots.swapAt(hole, i)
            hole = i
        }
        slots[hole] = Slot(key: 0, value: nil)
        count -= 1
        return removed
    }

    /// Removes every entry, keeping the storage.
    mutating func removeAll() {
        guard count > 0 else { return }
        for i in slots.indices where slots[i].key != 0 { slots[i] = Slot(key: 0, value: nil) }
        count = 0
    }

    private mutating func grow() {
        let old = slots
        let capacity = max(8, old.count * 2)
        slots = Array(repeating: Slot(key: 0, value: nil), count: capacity)
        shift = 64 - capacity.trailingZeroBitCount
        count = 0
        for slot in old where slot.key != 0 {
            if let value = slot.value { insert(slot.key, value) }
        }
    }
}
