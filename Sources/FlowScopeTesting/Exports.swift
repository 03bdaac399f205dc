// `import FlowScopeTesting` alone gives a test everything it needs: the engine's types (Flow,
// FlowLoading, FlowClient), scenarios (Scenario) and the virtual clock, the event SDK (Envelope,
// EventSink, for the sink conformance check), and the tools that need no test framework (call
// timelines, the stub backend).
@_exported import FlowEvents
@_exported import FlowFetch
@_exported import FlowScopeTools
@_exported import FlowSim
