@testable import FlowFetch
import Testing

@Suite("The engine's id table")
struct IDTableTests {
    /// A small deterministic generator (the test must replay the same operations when it fails).
    struct Steps {
        var state: UInt64
        mutating func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
    }

    @Test("agrees with a Dictionary over random inserts, replacements and removals, through growth")
    func matchesDictionary() {
        var table = IDTable<Int>()
        var model: [Int: Int] = [:]
        var steps = Steps(state: 42)
        var nextID = 1
        for step in 0..<200_000 {
            switch steps.next(10) {
            case 0...4:  // a new id, as the engine hands them out
                table[nextID] = step
                model[nextID] = step
                nextID += 1
            case 5:  // replace a live one
                let id = max(1, nextID - 1 - steps.next(50))
                if model[id] != nil { table[id] = -step; model[id] = -step }
            default:  // remove a recent or an old one (or one already gone)
                let id = max(1, nextID - 1 - steps.next(steps.next(2) == 0 ? 8 : 2_000))
                #expect(table.removeValue(forKey: id) == model.removeValue(forKey: id))
            }
            if step % 997 == 0 {
                #expect(table.count == model.count)
                for id in max(1, nextID - 3_000)..<nextID where table[id] != model[id] {
                    Issue.record("id \(id): table \(String(describing: table[id])), dictionary \(String(describing: model[id]))")
                    return
                }
            }
        }
        #expect(Set(table.keysInTableOrder) == Set(model.keys))
    }

    @Test("ids that were never handed out (0, negative) are simply absent")
    func foreignIDs() {
        var table = IDTable<String>()
        table[1] = "a"
        #expect(table[0] == nil && table[-5] == nil)
        #expect(table.removeValue(forKey: 0) == nil && table.removeValue(forKey: -1) == nil)
        #expect(table[1] == "a" && table.count == 1)
    }
}
