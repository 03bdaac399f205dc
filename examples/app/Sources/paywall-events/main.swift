import ConsoleSink
import FlowEvents
import FlowFetch
import Foundation
import Paywall

// paywall-app with the engine's events fed to an in-process pipeline. Its one sink is the built-in
// console timeline on standard error; any EventSink, one of your own too, goes in the list.
let url = URL(string: CommandLine.arguments.dropFirst().first ?? "http://127.0.0.1:8080")!
let pipeline = EventPipeline(sinks: [ConsoleSink(stream: .stderr)])
var status: Int32 = 0
do {
    let client = FlowClient(profile: Profile(id: "user-42"), backend: try HTTPBackend(baseURL: url), events: pipeline)
    let flow = try await loadPaywall(client)
    print("\(flow.placementId): variation \(flow.variationId) from \(flow.source)")
} catch {
    print("no paywall: \(error)")
    status = 1
}
pipeline.shutdown()   // every sink consumes what is queued, then is flushed and closed
exit(status)
