import FlowJSON
import Foundation

extension SimulationResult {
    /// A self-contained HTML report (inline CSS, hand-drawn SVG, no script, nothing fetched): the
    /// table, the time-to-flow distribution per strategy, the source shares as stacked bars, and
    /// targeting with its confidence interval.
    public func html() -> String {
        let palette = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777", "#4b5563", "#65a30d"]
        func color(_ i: Int) -> String { palette[i % palette.count] }
        var out = """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8">
        <title>FlowScope strategy lab: seed \(seed), \(sessions) sessions</title>
        <style>
        body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;color:#111827;padding:0 1rem}
        h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}
        table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
        th,td{padding:.3rem .5rem;border-bottom:1px solid #e5e7eb;text-align:right;white-space:nowrap}
        th:first-child,td:first-child{text-align:left;white-space:normal}
        td.best{font-weight:700;background:#ecfdf5}
        small,.ci{color:#6b7280;font-size:.8em}
        svg{max-width:100%;height:auto;font:11px system-ui,sans-serif}
        .legend span{display:inline-block;margin-right:1rem}
        .legend i{display:inline-block;width:.8em;height:.8em;margin-right:.3em;vertical-align:middle}
        </style></head><body>
        <h1>Strategy lab</h1>
        <p>\(sessions) simulated sessions per strategy, seed \(seed), played through the real engine in virtual time.
        Shares are of displays (a placement shown); intervals are 95%.</p>

        """
        out += tableHTML()
        out += "<h2>Time to flow</h2>\n<p><small>Share of displays whose flow (or nothing to show) was there within x seconds of the moment the placement was needed; log scale.</small></p>\n"
        out += cdfSVG(color)
        out += "<h2>Where flows came from</h2>\n"
        out += sourcesSVG()
        out += "<h2>Targeting correct</h2>\n<p><small>Share of displays showing a variation of the audience the user belonged to at display time, with its 95% Wilson interval.</small></p>\n"
        out += targetingSVG(color)
        out += "<h2>Population and strategies</h2>\n<pre>" + escapeHTML(population.json.jsonText) + "\n"
        for s in strategies { out += escapeHTML(s.strategy.json.jsonText) + "\n" }
        out += "</pre>\n<p><small>Throughput: \(Int(throughput.callsPerSecond.rounded())) engine calls/s on \(throughput.threads) thread(s).</small></p>\n</body></html>\n"
        return out
    }

    private func tableHTML() -> String {
        struct Col { var title: String; var better: Int; var value: (StrategyResult) -> Double; var text: (Double) -> String; var ci: (StrategyResult) -> String }
        func pct(_ v: Double) -> String { String(format: "%.1f%%", v * 100) }
        func sec(_ v: Double) -> String { String(format: "%.2f s", v) }
        var cols: [Col] = [Col(title: "targeting", better: 1, value: \.targetingCorrect, text: pct, ci: { r in
            let i = r.targetingCorrectInterval; return "\(pct(i.low))–\(pct(i.high))" })]
        for (t, q) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)] {
            cols.append(Col(title: t, better: -1, value: { $0.timeToFlow(q) }, text: sec, ci: { r in
                let i = r.tally.timeToFlow.quantileInterval(q); return "\(sec(i.low))–\(sec(i.high))" }))
        }
        cols.append(Col(title: "max", better: -1, value: \.timeToFlowMax, text: sec, ci: { _ in "" }))
        let better = [0, 0, -1, -1, -1]
        for (i, name) in StrategyTally.sourceNames.enumerated() {
            cols.append(Col(title: name, better: better[i], value: { $0.sourceShares[i] }, text: pct, ci: { r in
                let w = Confidence.wilson(r.tally.sources[i], r.tally.displays); return "\(pct(w.low))–\(pct(w.high))" }))
        }
        cols.append(Col(title: "requests/session", better: -1, value: { $0.requestsPerSession.mean }, text: { String(format: "%.2f", $0) },
                        ci: { r in let m = r.requestsPerSession; return String(format: "%.2f–%.2f", m.low, m.high) }))
        var out = "<table><thead><tr><th>strategy</th>"
        for c in cols { out += "<th>\(c.title)</th>" }
        out += "</tr></thead><tbody>\n"
        for s in strategies {
            out += "<tr><td>\(escapeHTML(s.strategy.name))</td>"
            for c in cols {
                let v = c.value(s)
                let values = strategies.map(c.value)
                let best = c.better == 0 || strategies.count < 2 ? false
                    : c.text(v) == c.text(c.better > 0 ? values.max() ?? v : values.min() ?? v)
                let ci = c.ci(s)
                out += "<td\(best ? " class=\"best\"" : "")>\(c.text(v))\(ci.isEmpty ? "" : "<br><span class=\"ci\">\(ci)</span>")</td>"
            }
            out += "</tr>\n"
        }
        return out + "</tbody></table>\n"
    }

    private func cdfSVG(_ color: (Int) -> String) -> String {
        let w = 900.0, h = 340.0, left = 50.0, right = 20.0, top = 10.0, bottom = 40.0
        let maxT = max(strategies.map(\.timeToFlowMax).max() ?? 1, 0.1)
        let lo = 0.01, hi = pow(10, (log10(maxT)).rounded(.up))
        func x(_ t: Double) -> Double { left + (w - left - right) * (log10(max(t, lo)) - log10(lo)) / (log10(hi) - log10(lo)) }
        func y(_ s: Double) -> Double { top + (h - top - bottom) * (1 - s) }
        var out = "<svg viewBox=\"0 0 \(Int(w)) \(Int(h))\" role=\"img\" aria-label=\"time to flow distribution\">\n"
        var decade = lo
        while decade <= hi * 1.0001 {
            out += "<line x1=\"\(f(x(decade)))\" y1=\"\(f(top))\" x2=\"\(f(x(decade)))\" y2=\"\(f(h - bottom))\" stroke=\"#e5e7eb\"/>"
            out += "<text x=\"\(f(x(decade)))\" y=\"\(f(h - bottom + 14))\" text-anchor=\"middle\">\(decade < 1 ? String(format: "%g", decade) : String(Int(decade)))s</text>\n"
            decade *= 10
        }
        for s in [0.0, 0.25, 0.5, 0.75, 0.95, 1.0] {
            out += "<line x1=\"\(f(left))\" y1=\"\(f(y(s)))\" x2=\"\(f(w - right))\" y2=\"\(f(y(s)))\" stroke=\"#e5e7eb\"/>"
            out += "<text x=\"\(f(left - 4))\" y=\"\(f(y(s) + 4))\" text-anchor=\"end\">\(Int(s * 100))%</text>\n"
        }
        for (i, s) in strategies.enumerated() {
            let points = s.cdf(points: 200)
            guard !points.isEmpty else { continue }
            var d = "M\(f(x(lo))) \(f(y(0)))"
            for p in points { d += " H\(f(x(p.seconds))) V\(f(y(p.share)))" }
            d += " H\(f(w - right))"
            out += "<path d=\"\(d)\" fill=\"none\" stroke=\"\(color(i))\" stroke-width=\"1.8\"><title>\(escapeHTML(s.strategy.name))</title></path>\n"
        }
        out += "</svg>\n<p class=\"legend\">"
        for (i, s) in strategies.enumerated() { out += "<span><i style=\"background:\(color(i))\"></i>\(escapeHTML(s.strategy.name))</span>" }
        return out + "</p>\n"
    }

    private func sourcesSVG() -> String {
        let colors = ["#2563eb", "#16a34a", "#ca8a04", "#9333ea", "#dc2626"]
        let rowH = 26.0, labelW = 300.0, barW = 560.0, w = labelW + barW + 20
        let h = Double(strategies.count) * rowH + 10
        var out = "<svg viewBox=\"0 0 \(Int(w)) \(Int(h))\" role=\"img\" aria-label=\"source shares\">\n"
        for (r, s) in strategies.enumerated() {
            let yy = Double(r) * rowH + 5
            out += "<text x=\"\(f(labelW - 8))\" y=\"\(f(yy + 15))\" text-anchor=\"end\">\(escapeHTML(s.strategy.name))</text>"
            var xx = labelW
            for (i, share) in s.sourceShares.enumerated() where share > 0 {
                let width = barW * share
                out += "<rect x=\"\(f(xx))\" y=\"\(f(yy))\" width=\"\(f(width))\" height=\"\(f(rowH - 6))\" fill=\"\(colors[i])\">"
                out += "<title>\(StrategyTally.sourceNames[i]): \(String(format: "%.1f%%", share * 100))</title></rect>"
                if width > 34 {
                    out += "<text x=\"\(f(xx + width / 2))\" y=\"\(f(yy + 14))\" text-anchor=\"middle\" fill=\"#fff\">\(String(format: "%.0f%%", share * 100))</text>"
                }
                xx += width
            }
            out += "\n"
        }
        out += "</svg>\n<p class=\"legend\">"
        for (i, name) in StrategyTally.sourceNames.enumerated() { out += "<span><i style=\"background:\(colors[i])\"></i>\(name)</span>" }
        return out + "</p>\n"
    }

    private func targetingSVG(_ color: (Int) -> String) -> String {
        let rowH = 24.0, labelW = 300.0, barW = 560.0, w = labelW + barW + 70
        let h = Double(strategies.count) * rowH + 10
        var out = "<svg viewBox=\"0 0 \(Int(w)) \(Int(h))\" role=\"img\" aria-label=\"targeting correct\">\n"
        for (r, s) in strategies.enumerated() {
            let yy = Double(r) * rowH + 5
            let ci = s.targetingCorrectInterval
            out += "<text x=\"\(f(labelW - 8))\" y=\"\(f(yy + 14))\" text-anchor=\"end\">\(escapeHTML(s.strategy.name))</text>"
            out += "<rect x=\"\(f(labelW))\" y=\"\(f(yy))\" width=\"\(f(barW * s.targetingCorrect))\" height=\"\(f(rowH - 8))\" fill=\"\(color(r))\" opacity=\".8\"/>"
            out += "<line x1=\"\(f(labelW + barW * ci.low))\" y1=\"\(f(yy + 8))\" x2=\"\(f(labelW + barW * ci.high))\" y2=\"\(f(yy + 8))\" stroke=\"#111827\" stroke-width=\"2\"/>"
            out += "<text x=\"\(f(labelW + barW + 6))\" y=\"\(f(yy + 13))\">\(String(format: "%.1f%%", s.targetingCorrect * 100))</text>\n"
        }
        return out + "</svg>\n"
    }

    private func f(_ v: Double) -> String { String(format: "%.1f", v) }

}
