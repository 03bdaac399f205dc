// FlowScopeTesting: see the issue that builds it.
