// The test kit builds on the tools that need no test framework (timelines, the stub backend);
// importing FlowScopeTesting brings them too.
@_exported import FlowScopeTools
