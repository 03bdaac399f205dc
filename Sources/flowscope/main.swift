import FlowScopeCLI
#if canImport(Glibc)
import Glibc
#endif

// No command dies of SIGPIPE: a peer that closes a socket or pipe is an error (EPIPE) like any other.
signal(SIGPIPE, SIG_IGN)
exit(await CommandLine.run(Array(CommandLine.arguments.dropFirst())))
