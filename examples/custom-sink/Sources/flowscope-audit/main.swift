import AuditSink
import FlowScopeCLI
import Foundation

// `flowscope` with one more sink type: configs given to this binary may use `type: "audit"`.
exit(await CommandLine.run(Array(CommandLine.arguments.dropFirst()), sinks: [AuditSinkFactory()]))
