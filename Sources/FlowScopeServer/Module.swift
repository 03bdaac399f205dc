// FlowScopeServer: see the issue that builds it.
