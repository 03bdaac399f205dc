// The test kit builds on the tools that need no test framework (call timelines); importing
// FlowScopeTesting brings them too. The real-socket stub backend is the FlowScopeStubBackend library.
@_exported import FlowScopeTools
