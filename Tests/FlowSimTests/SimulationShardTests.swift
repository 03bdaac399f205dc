import Testing
@testable import FlowSim

/// `flowscope simulate --sessions 9223372036854775807` trapped (arithmetic overflow) in
/// `Simulation.run` computing its shards as `(total + shardSize - 1) / shardSize`.
@Suite("Strategy lab: shards of any number of sessions")
struct SimulationShardTests {
    @Test("the shard count is rounded up without overflow, up to Int.max sessions",
          arguments: [0, 1, 249, 250, 251, 20_000, Int.max - 249, Int.max - 1, Int.max])
    func shardCount(_ total: Int) {
        let n = Simulation.shardCount(total)
        let size = Simulation.shardSize
        #expect(n == total / size + (total % size == 0 ? 0 : 1))
        guard n > 0 else { return }
        let last = Simulation.sessions(ofShard: n - 1, total: total)
        #expect(last.upperBound == total)
        #expect(last.count >= 1 && last.count <= size)
        #expect(Simulation.sessions(ofShard: 0, total: total) == 0..<min(size, total))
    }
}
