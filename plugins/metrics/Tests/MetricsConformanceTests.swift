import FlowScopeTesting
import MetricsSink
import Testing

@Test("the metrics sink passes the sink conformance check")
func metricsSinkConforms() {
    let failures = SinkConformance.check(name: "metrics", make: { try MetricsSink(version: "test") })
    #expect(failures.isEmpty, "\(failures)")
}
