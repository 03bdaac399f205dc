import AuditSink
import FlowScopeCLI
import Foundation

// `flowscope` with two more sink types: configs given to this binary may use `type: "audit"`
// and `type: "recent"`.
exit(await CommandLine.run(Array(CommandLine.arguments.dropFirst()), sinks: [AuditSinkFactory(), RecentStoreFactory()]))
