import Synchronization

/// At most `limit` requests in flight through one backend; the others wait their turn, first come
/// first served, suspended (no thread is held). A waiting request whose task is cancelled leaves the
/// queue at once.
///
/// A preload of thousands of placements otherwise hands them all to URLSession together, whose
/// Linux implementation (libcurl) adds and removes each transfer in time proportional to the number
/// in flight: starting and cancelling 5,000 took seconds, far past the call's budget. Browsers and
/// Apple's URLSession cap connections per host the same way (4 to 6 for HTTP/1.1).
final class RequestGate: Sendable {
    /// The most requests in flight at once.
    let limit: Int

    private struct State {
        var inFlight = 0
        var nextTicket: UInt64 = 0
        /// Tickets in arrival order from `head`; a ticket no longer in `waiting` was cancelled.
        var order: [UInt64] = []
        var head = 0
        var waiting: [UInt64: CheckedContinuation<Bool, Never>] = [:]
    }
    private let state = Mutex(State())

    init(limit: Int) { self.limit = max(1, limit) }

    /// Waits for a place; false when the task was cancelled first (no place is then held).
    func enter() async -> Bool {
        let ticket = state.withLock { s -> UInt64? in
            if s.inFlight < limit && s.waiting.isEmpty {
                s.inFlight += 1
                return nil
            }
            s.nextTicket += 1
            return s.nextTicket
        }
        guard let ticket else { return true }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let admitted = state.withLock { s -> Bool? in
                    // A cancellation that came before this point found no waiter to resume.
                    if Task.isCancelled { return false }
                    if s.inFlight < limit && s.waiting.isEmpty {
                        s.inFlight += 1
                        return true
                    }
                    s.waiting[ticket] = continuation
                    s.order.append(ticket)
                    return nil
                }
                if let admitted { continuation.resume(returning: admitted) }
            }
        } onCancel: {
            state.withLock { $0.waiting.removeValue(forKey: ticket) }?.resume(returning: false)
        }
    }

    /// Gives the place back: to the longest-waiting request, if any.
    func leave() {
        let next = state.withLock { s -> CheckedContinuation<Bool, Never>? in
            while s.head < s.order.count {
                let ticket = s.order[s.head]
                s.head += 1
                if let continuation = s.waiting.removeValue(forKey: ticket) {
                    if s.head > 1024 && s.head * 2 > s.order.count {
                        s.order.removeFirst(s.head)
                        s.head = 0
                    }
                    return continuation  // the place passes to it: inFlight is unchanged
                }
            }
            s.order.removeAll(keepingCapacity: true)
            s.head = 0
            s.inFlight -= 1
            return nil
        }
        next?.resume(returning: true)
    }

    /// Requests in flight and waiting, for tests.
    var counts: (inFlight: Int, waiting: Int) { state.withLock { ($0.inFlight, $0.waiting.count) } }
}
