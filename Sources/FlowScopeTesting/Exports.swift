// `import FlowScopeTesting` gives a test all of FlowScope it needs: the engine's types (Flow,
// FlowLoading, FlowClient), scenarios (Scenario) and the virtual clock, the event SDK (Envelope,
// EventSink, for the sink conformance check), and the tools that need no test framework (call
// timelines). The test framework (Testing or XCTest) and Foundation are imported as usual. The real-socket stub backend is the FlowScopeStubBackend library (Linux and macOS).
@_exported import FlowEvents
@_exported import FlowFetch
@_exported import FlowScopeTools
@_exported import FlowSim
