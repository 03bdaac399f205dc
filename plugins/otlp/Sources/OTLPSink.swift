import FlowEvents
