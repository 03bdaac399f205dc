import FlowEvents
import Synchronization

/// The test runs of a store's events (``TestRunFold``), read from the store once and kept up to
/// date from its feed: what `GET /api/runs` joins to the runs' summaries.
final class TestRunIndex: Sendable {
    private let fold = Mutex(TestRunFold())
    private let unfollow = Mutex<(@Sendable () -> Void)?>(nil)

    /// Follows `store`, then folds the test events it already holds, a layered store's archive
    /// included (an event seen twice changes nothing).
    init(store: any EventStore, page: Int = 1000) {
        let stop = store.follow { [weak self] batch in self?.add(batch) }
        unfollow.withLock { $0 = stop }
        let layers: [any EventStore] = (store as? LayeredEventStore).map { [$0.archive, $0.primary] } ?? [store]
        for layer in layers { load(layer, page: page) }
    }

    private func load(_ store: any EventStore, page: Int) {
        for name in ["test.start", "test.end"] {
            var since: UInt64 = 0
            while true {
                let events = store.events(since: since, limit: page, run: nil, placement: nil, name: name)
                add(events)
                guard events.count == page, let last = events.last, last.seq > since else { break }
                since = last.seq
            }
        }
    }

    deinit { unfollow.withLock { $0 }?() }

    private func add(_ batch: [Envelope]) {
        guard batch.contains(where: TestRunFold.reads) else { return }
        fold.withLock { fold in for e in batch where TestRunFold.reads(e) { fold.add(e) } }
    }

    /// The fold as it is now.
    var current: TestRunFold { fold.withLock { $0 } }
}
