import FlowFetch
import Foundation
import Paywall

// Loads the main paywall from the backend named on the command line and prints where it came from.
let url = URL(string: CommandLine.arguments.dropFirst().first ?? "http://127.0.0.1:8080")!
do {
    let client = FlowClient(profile: Profile(id: "user-42"), backend: try HTTPBackend(baseURL: url))
    let flow = try await loadPaywall(client)
    print("\(flow.placementId): variation \(flow.variationId) from \(flow.source)")
} catch {
    print("no paywall: \(error)")
    exit(1)
}
