import FlowScopeCLI
#if canImport(Glibc)
import Glibc
#endif

exit(await CommandLine.run(Array(CommandLine.arguments.dropFirst())))
