// FlowSim: see the issue that builds it.
