import FlowJSON
import Foundation

private func pct(_ v: Double) -> String { String(format: "%.1f%%", v * 100) }
private func sec(_ v: Double) -> String { v < 10 ? String(format: "%.2fs", v) : String(format: "%.1fs", v) }
private func num(_ v: Double) -> String { JSONValue.number(v).jsonText }

extension StrategyLab {
    /// The text report: the fit (with its warnings), the strategies table (or, with a sweep, the
    /// curves per placement), and the recommendation per placement.
    public func table(color: Bool = false) -> String {
        var out = ""
        if let fit { out += fitTable(fit) + "\n" }
        if let sweep {
            out += curvesTable(sweep)
            out += "\n\(result.sessions) sessions, seed \(result.seed); 95% intervals in the JSON. "
                + "throughput: \(Int(result.throughput.callsPerSecond.rounded())) engine calls/s "
                + "(\(result.throughput.calls) calls, \(String(format: "%.2f", result.throughput.wallSeconds)) s)\n"
        } else {
            out += result.table(color: color)
        }
        if fit != nil || sweep != nil { out += "\n" + recommendationText() }
        return out
    }

    private func fitTable(_ fit: TrafficFit) -> String {
        var out = "Fitted to \(fit.overall.requests) recorded flow requests (\(fit.events) events); "
            + "p50/p95: log-normal fitted with timeouts censored at their budget (Kaplan-Meier in brackets).\n"
        let header = ["placement", "kind", "requests", "p50", "p95", "timeouts (95% CI)", "failures"]
        var rows: [[String]] = []
        for placement in fit.fits.keys.sorted() {
            for kind in (fit.fits[placement] ?? [:]).keys.sorted() {
                guard let f = fit.fits[placement]?[kind] else { continue }
                func q(_ v: Double?, _ km: Double?) -> String {
                    (v.map(sec) ?? "-") + " [" + (km.map(sec) ?? ">max") + "]"
                }
                let ci = Confidence.wilson(f.timeouts, f.requests)
                var failures = f.failures.sorted { $0.key < $1.key }.map { "\($0.key) \(pct(Double($0.value) / Double(f.requests)))" }
                if f.cancelled > 0 { failures.append("cancelled \(pct(Double(f.cancelled) / Double(f.requests)))") }
                rows.append([placement, kind, "\(f.requests)\(f.requests < TrafficFit.minimumRequests ? "!" : "")",
                             q(f.quantile(0.5), f.kaplanMeierP50), q(f.quantile(0.95), f.kaplanMeierP95),
                             "\(pct(f.timeoutShare)) (\(pct(ci.low))-\(pct(ci.high)))",
                             failures.isEmpty ? "-" : failures.joined(separator: ", ")])
            }
        }
        out += Self.grid(header, rows)
        if case .logNormal(let m, let p)? = fit.attributionDelay {
            out += "attribution delay: median \(sec(m)), p95 \(sec(p)) (\(fit.attributionDelays.count) attribution.applied events)\n"
        }
        for w in fit.warnings { out += "warning: \(w)\n" }
        return out
    }

    private func curvesTable(_ sweep: SweepParameter) -> String {
        var out = ""
        let swept = baseStrategies.indices.filter { b in variants.contains { $0.base == b && $0.value != nil } }
        let flat = baseStrategies.indices.filter { !swept.contains($0) }
        out += "Sweep of \(sweep.name) over \(sweep.values.count) values: targeting correct / time-to-flow p95 per placement "
            + "(* the recommendation, p95 bound \(sec(maxP95))).\n"
        for (i, b) in swept.enumerated() { out += "  [\(i + 1)] \(baseStrategies[b].name)\n" }
        for (p, placement) in placements.enumerated() {
            let recommended = recommendation(for: placement)
            out += "\n\(placement)\(recommends(placement) ? "" : " (too few recorded requests: no recommendation)")\n"
            var rows: [[String]] = []
            for value in sweep.values {
                var row = [num(value)]
                for b in swept {
                    guard let k = variants.indices.first(where: { variants[$0].base == b && variants[$0].value == value }) else {
                        row.append("")
                        continue
                    }
                    let pt = point(variant: k, placement: p)
                    row.append("\(pct(pt.targetingCorrect)) \(sec(pt.p95))\(recommended?.point.variant == k ? "*" : "")")
                }
                rows.append(row)
            }
            out += Self.grid([sweep.name] + swept.indices.map { "[\($0 + 1)]" }, rows)
            for b in flat {
                guard let k = variants.indices.first(where: { variants[$0].base == b }) else { continue }
                let pt = point(variant: k, placement: p)
                out += "  (\(sweep.name) does not apply) \(baseStrategies[b].name): \(pct(pt.targetingCorrect)) "
                    + "\(sec(pt.p95))\(recommended?.point.variant == k ? "*" : "")\n"
            }
        }
        return out
    }

    private func recommendationText() -> String {
        var out = "Recommendation (highest targeting correct with time-to-flow p95 <= \(sec(maxP95)); 95% intervals):\n"
        for placement in placements {
            guard let recommended = recommendation(for: placement) else {
                out += "  \(placement): none (\(recommends(placement) ? "no displays" : "too few recorded requests"))\n"
                continue
            }
            let pt = recommended.point, meets = recommended.meetsBound
            let variant = variants[pt.variant]
            let played = result.strategies[pt.variant].strategy
            var at = ""
            if let sweep, let v = variant.value { at = " at \(sweep.name) \(num(v))" } else if let t = played.loadTimeout { at = " (loadTimeout \(num(t)))" }
            out += "  \(placement): \(baseStrategies[variant.base].name)\(at): targeting \(pct(pt.targetingCorrect)) "
                + "(\(pct(pt.targetingCorrectCI.low))-\(pct(pt.targetingCorrectCI.high))), p95 \(sec(pt.p95)) "
                + "(\(sec(pt.p95CI.low))-\(sec(pt.p95CI.high)))"
                + (meets ? "" : "; no strategy meets the p95 bound, this one has the lowest p95") + "\n"
        }
        return out
    }

    static func grid(_ header: [String], _ rows: [[String]]) -> String {
        let widths = header.indices.map { c in max(header[c].count, rows.map { c < $0.count ? $0[c].count : 0 }.max() ?? 0) }
        func line(_ cells: [String]) -> String {
            cells.indices.map { c in c == 0 ? cells[c].padded(widths[c]) : cells[c].leftPadded(widths[c]) }.joined(separator: "  ") + "\n"
        }
        var out = line(header)
        out += String(repeating: "-", count: widths.reduce(0, +) + 2 * (widths.count - 1)) + "\n"
        for r in rows { out += line(r) }
        return out
    }
}

// MARK: HTML

extension StrategyLab {
    /// The self-contained HTML report: without a sweep the lab's report (``SimulationResult/html()``)
    /// with the fit and the recommendation added; with a sweep, per placement a chart of targeting
    /// correct and time-to-flow p95 against the swept value (hand-drawn SVG, the recommended point
    /// marked, the p95 bound dashed).
    public func html() -> String {
        var extra = ""
        if let fit { extra += "<h2>Fitted to recorded traffic</h2>\n<pre>" + escapeHTML(fitTable(fit)) + "</pre>\n" }
        if let sweep {
            extra += "<h2>Sweep of \(escapeHTML(sweep.name))</h2>\n<p><small>Per placement: targeting correct (left) and "
                + "time-to-flow p95 (right) against \(escapeHTML(sweep.name)); the dashed line is the p95 bound "
                + "(\(num(maxP95)) s), the ringed point the recommendation; bars are 95% intervals.</small></p>\n"
            for (p, placement) in placements.enumerated() { extra += sweepSVG(sweep, placement: placement, index: p) }
        }
        if fit != nil || sweep != nil {
            extra += "<h2>Recommendation</h2>\n<pre>" + escapeHTML(recommendationText()) + "</pre>\n"
        }
        if sweep != nil {
            // The full table would have a row per strategy and value: the curves replace it.
            return """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            <title>FlowScope strategy lab: sweep, seed \(result.seed), \(result.sessions) sessions</title>
            <style>
            body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;color:#111827;padding:0 1rem}
            h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}h3{font-size:1rem}
            small{color:#6b7280}svg{max-width:100%;height:auto;font:11px system-ui,sans-serif}pre{overflow-x:auto;font-size:12px}
            </style></head><body>
            <h1>Strategy lab</h1>
            <p>\(result.sessions) simulated sessions per strategy and value, seed \(result.seed), played through the real engine in virtual time.</p>
            \(extra)</body></html>

            """
        }
        let base = result.html()
        guard let end = base.range(of: "<h2>Population and strategies</h2>") else { return base + extra }
        return base.replacingCharacters(in: end.lowerBound..<end.lowerBound, with: extra)
    }

    private func sweepSVG(_ sweep: SweepParameter, placement: String, index p: Int) -> String {
        let palette = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"]
        let panelW = 480.0, panelH = 260.0, left = 52.0, right = 12.0, top = 16.0, bottom = 36.0
        let xs = sweep.values
        guard let xMin = xs.min(), let xMax = xs.max() else { return "" }
        let xSpan = xMax > xMin ? xMax - xMin : 1
        var curves: [(name: String, color: String, points: [(x: Double?, pt: Point)])] = []
        for (b, base) in baseStrategies.enumerated() {
            let ks = variants.indices.filter { variants[$0].base == b }
            curves.append((base.name, palette[b % palette.count], ks.map { (x: variants[$0].value, pt: point(variant: $0, placement: p)) }))
        }
        let allP95 = curves.flatMap { $0.points.map { $0.pt.p95CI.high } } + [maxP95]
        let yMaxP95 = max(0.5, (allP95.max() ?? 1) * 1.08)
        let tcLow = curves.flatMap { $0.points.map { $0.pt.targetingCorrectCI.low } }.min() ?? 0
        let yMinTC = max(0, (tcLow * 20).rounded(.down) / 20)
        let recommended = recommendation(for: placement)
        var out = "<h3>\(escapeHTML(placement))\(recommends(placement) ? "" : " <small>(too few recorded requests: no recommendation)</small>")</h3>\n"
        out += "<svg viewBox=\"0 0 \(Int(panelW * 2 + 20)) \(Int(panelH + 20 + 18.0 * Double(curves.count)))\" role=\"img\" aria-label=\"sweep of \(escapeHTML(sweep.name)) for \(escapeHTML(placement))\">\n"
        for panel in 0..<2 {
            let ox = Double(panel) * (panelW + 20)
            let yLo = panel == 0 ? yMinTC : 0, yHi = panel == 0 ? 1.0 : yMaxP95
            func x(_ v: Double) -> Double { ox + left + (v - xMin) / xSpan * (panelW - left - right) }
            func y(_ v: Double) -> Double { top + (1 - (v - yLo) / (yHi - yLo)) * (panelH - top - bottom) }
            out += "<rect x=\"\(f(ox + left))\" y=\"\(f(top))\" width=\"\(f(panelW - left - right))\" height=\"\(f(panelH - top - bottom))\" fill=\"none\" stroke=\"#d1d5db\"/>\n"
            for i in 0...4 {
                let v = yLo + (yHi - yLo) * Double(i) / 4
                out += "<line x1=\"\(f(ox + left))\" x2=\"\(f(ox + panelW - right))\" y1=\"\(f(y(v)))\" y2=\"\(f(y(v)))\" stroke=\"#f3f4f6\"/>"
                out += "<text x=\"\(f(ox + left - 4))\" y=\"\(f(y(v) + 4))\" text-anchor=\"end\">\(panel == 0 ? pct(v) : sec(v))</text>\n"
            }
            // Ticks at swept values: at most six, evenly spread.
            let every = max(1, (xs.count + 5) / 6)
            for (i, v) in xs.enumerated() where i % every == 0 {
                out += "<text x=\"\(f(x(v)))\" y=\"\(f(panelH - bottom + 14))\" text-anchor=\"middle\">\(num(v))</text>\n"
            }
            out += "<text x=\"\(f(ox + left + (panelW - left - right) / 2))\" y=\"\(f(panelH - 6))\" text-anchor=\"middle\">\(escapeHTML(sweep.name)) (s)</text>\n"
            out += "<text x=\"\(f(ox + left))\" y=\"\(f(top - 4))\">\(panel == 0 ? "targeting correct" : "time to flow p95")</text>\n"
            if panel == 1 {
                out += "<line x1=\"\(f(ox + left))\" x2=\"\(f(ox + panelW - right))\" y1=\"\(f(y(maxP95)))\" y2=\"\(f(y(maxP95)))\" stroke=\"#6b7280\" stroke-dasharray=\"5 4\"/>\n"
            }
            for curve in curves {
                func value(_ pt: Point) -> Double { panel == 0 ? pt.targetingCorrect : pt.p95 }
                func interval(_ pt: Point) -> (low: Double, high: Double) { panel == 0 ? pt.targetingCorrectCI : pt.p95CI }
                if curve.points.count == 1, curve.points[0].x == nil {
                    // Not swept: the same value at every x, dashed.
                    let v = y(value(curve.points[0].pt))
                    out += "<line x1=\"\(f(x(xMin)))\" x2=\"\(f(x(xMax)))\" y1=\"\(f(v))\" y2=\"\(f(v))\" stroke=\"\(curve.color)\" stroke-dasharray=\"2 3\"/>\n"
                    continue
                }
                let path = curve.points.compactMap { pt in pt.x.map { "\(f(x($0))),\(f(y(value(pt.pt))))" } }.joined(separator: " ")
                out += "<polyline fill=\"none\" stroke=\"\(curve.color)\" stroke-width=\"1.5\" points=\"\(path)\"/>\n"
                for pt in curve.points {
                    guard let xv = pt.x else { continue }
                    let i = interval(pt.pt)
                    out += "<line x1=\"\(f(x(xv)))\" x2=\"\(f(x(xv)))\" y1=\"\(f(y(i.low)))\" y2=\"\(f(y(i.high)))\" stroke=\"\(curve.color)\" stroke-opacity=\"0.4\"/>"
                    out += "<circle cx=\"\(f(x(xv)))\" cy=\"\(f(y(value(pt.pt))))\" r=\"2\" fill=\"\(curve.color)\"><title>\(escapeHTML(curve.name)) at \(num(xv)): "
                        + "\(pct(pt.pt.targetingCorrect)), p95 \(sec(pt.pt.p95))</title></circle>\n"
                }
            }
            if let r = recommended {
                let xv = variants[r.point.variant].value ?? xMin
                let yv = panel == 0 ? r.point.targetingCorrect : r.point.p95
                out += "<circle class=\"recommended\" cx=\"\(f(x(xv)))\" cy=\"\(f(y(yv)))\" r=\"7\" fill=\"none\" stroke=\"#111827\" stroke-width=\"2\"><title>recommended</title></circle>\n"
            }
        }
        for (i, curve) in curves.enumerated() {
            let ly = panelH + 14 + 18.0 * Double(i)
            out += "<rect x=\"\(f(left))\" y=\"\(f(ly))\" width=\"10\" height=\"10\" fill=\"\(curve.color)\"/>"
            out += "<text x=\"\(f(left + 16))\" y=\"\(f(ly + 9))\">\(escapeHTML(curve.name))\(curve.points.first?.x == nil ? " (not swept)" : "")</text>\n"
        }
        return out + "</svg>\n"
    }

    private func f(_ v: Double) -> String { String(format: "%.1f", v) }
}

func escapeHTML(_ s: String) -> String {
    var out = ""
    for c in s {
        switch c {
        case "&": out += "&amp;"
        case "<": out += "&lt;"
        case ">": out += "&gt;"
        case "\"": out += "&quot;"
        default: out.append(c)
        }
    }
    return out
}
