// Simulation runs (`flowscope simulate`): one row per strategy and the time-to-flow CDF per strategy.
import { svg, tooltip, el, clear } from './svg.js';
import { sourceBar } from './placements.js';
import * as fmt from './format.js';

const SERIES = 8;

/** Whether a run detail is a saved simulation with strategies. */
export function hasStrategies(detail) {
  return detail !== null && typeof detail === 'object' && Array.isArray(detail.strategies) && detail.strategies.length > 0;
}

/** Renders the strategies table and the CDF chart of a simulation run detail. */
export function renderStrategies(section, detail) {
  const tbody = section.querySelector('tbody');
  const chart = section.querySelector('.chart-wrap');
  clear(tbody);
  clear(chart);
  if (!hasStrategies(detail)) { section.hidden = true; return; }
  section.hidden = false;
  const note = section.querySelector('.panel-note');
  const parts = [];
  if (Number.isFinite(detail.sessions)) parts.push(`${fmt.count(detail.sessions)} sessions`);
  if (Number.isFinite(detail.seed)) parts.push(`seed ${detail.seed}`);
  if (Number.isFinite(detail.throughput?.callsPerSecond)) parts.push(`${fmt.compact(detail.throughput.callsPerSecond)} calls/s simulated`);
  note.textContent = parts.join(' · ');

  // With a sweep the table would have a row per strategy and swept value, and the chart a line for
  // each: the sweep's curves replace both, as in the `--out` report (the run's JSON has every row).
  const swept = Array.isArray(detail.sweep?.values) && detail.sweep.values.length > 0;
  section.querySelector('.table-wrap').hidden = swept;
  if (swept) {
    renderSweep(chart, detail);
    return;
  }
  const list = detail.strategies;
  const best = bestValues(list);
  list.forEach((s, i) => {
    const tr = el('tr', null, null, { 'data-strategy': s.name ?? `#${i + 1}` });
    const name = el('th', null, null, { scope: 'row' });
    const label = el('div', 'strategy-name');
    label.appendChild(el('span', `swatch series-${i % SERIES}`, null, { 'aria-hidden': 'true' }));
    label.appendChild(el('span', null, s.name ?? `strategy ${i + 1}`, { title: s.name ?? '' }));
    name.appendChild(label);
    tr.appendChild(name);
    // One decimal, as the CLI's table: strategies are often within a point of each other.
    const correct = Number.isFinite(s.targetingCorrect) ? `${(100 * s.targetingCorrect).toFixed(1)}%` : '–';
    tr.appendChild(metricCell(correct, s.targetingCorrect === best.targetingCorrect));
    const t = s.timeToFlow ?? {};
    for (const q of ['p50', 'p95', 'p99']) tr.appendChild(metricCell(fmt.duration(t[q]), t[q] === best[q]));
    const barCell = el('td', 'bar-col');
    const wrap = el('div', 'bar-cell');
    const shares = { ...(s.sources ?? {}) };
    const none = shares.none ?? 0;
    delete shares.none;
    const bar = sourceBar(Object.fromEntries(Object.entries(shares).map(([k, v]) => [k, v * 10000])), 10000);
    if (none > 0) {
      // "none" (a blank screen) is drawn in the error colour at the end of the bar.
      const rects = bar.querySelectorAll('rect');
      const scale = 1 - none;
      rects.forEach((r) => {
        r.setAttribute('x', String(Number(r.getAttribute('x')) * scale));
        r.setAttribute('width', String(Number(r.getAttribute('width')) * scale));
      });
      const blank = svg('rect', { x: 100 * scale, y: 0, width: 100 * none, height: 10, class: 'seg src-error', 'data-source': 'none' });
      tooltip(blank, `none (blank screen): ${fmt.percent(none, 1)}`);
      bar.appendChild(blank);
    }
    wrap.appendChild(bar);
    wrap.appendChild(el('span', `bar-note${none > 0 ? ' bad' : ''}`, none > 0 ? `blank ${fmt.percent(none, 1)}` : `network ${fmt.percent(shares.network ?? 0, 1)}`));
    barCell.appendChild(wrap);
    tr.appendChild(barCell);
    tr.appendChild(metricCell(Number.isFinite(s.requestsPerSession) ? s.requestsPerSession.toFixed(2) : '–', s.requestsPerSession === best.requestsPerSession));
    tbody.appendChild(tr);
  });
  renderCDF(chart, list);
  renderSweep(chart, detail);
}

/** A share as an axis percentage with one decimal ("85.0%", "96.3%"), as the `--out` report writes it. */
export function axisPercent(v) {
  return Number.isFinite(v) ? `${(v * 100).toFixed(1)}%` : '–';
}

/**
 * The y ranges of a sweep chart, by the `--out` report's rule (StrategyLabReport.swift): targeting
 * correct from the lowest 95% interval's low end, rounded down to 5%, up to 100%; time-to-flow p95
 * from 0 to 1.08 × the highest of the intervals' high ends and the p95 bound, at least 0.5 s.
 * A point without an interval counts with its value.
 */
export function sweepRanges(curves, maxP95) {
  const points = curves.flatMap((c) => (Array.isArray(c?.points) ? c.points : []));
  const end = (p, ci, key, i) => (Array.isArray(p[ci]) && Number.isFinite(p[ci][i]) ? p[ci][i] : p[key]);
  const lows = points.map((p) => end(p, 'targetingCorrectCI', 'targetingCorrect', 0)).filter(Number.isFinite);
  const highs = points.map((p) => end(p, 'timeToFlowP95CI', 'timeToFlowP95', 1)).filter(Number.isFinite);
  if (Number.isFinite(maxP95)) highs.push(maxP95);
  let tcLo = lows.length ? Math.max(0, Math.floor(Math.min(...lows) * 20) / 20) : 0;
  if (tcLo >= 1) tcLo = 0.95; // every interval at 100%: a 5% band still shows the line
  const p95Hi = Math.max(0.5, (highs.length ? Math.max(...highs) : 0) * 1.08);
  return { targetingCorrect: [tcLo, 1], timeToFlowP95: [0, p95Hi] };
}

/**
 * A run with a sweep (`simulate --sweep`): per placement, targeting correct and time-to-flow p95
 * against the swept value, one line per strategy (dots at the swept values with their 95% intervals;
 * a strategy the parameter does not apply to dashed across), the p95 bound dashed, the
 * recommendation ringed, and a legend naming each strategy in its line's colour. The y ranges and
 * ticks follow the `--out` report.
 */
function renderSweep(container, detail) {
  const sweep = detail.sweep;
  if (!sweep || typeof sweep !== 'object' || !sweep.placements || !Array.isArray(sweep.values) || !sweep.values.length) return;
  const xs = sweep.values.filter(Number.isFinite);
  if (!xs.length) return;
  const xMin = Math.min(...xs), xMax = Math.max(...xs), xSpan = xMax > xMin ? xMax - xMin : 1;
  const bound = Number.isFinite(sweep.maxP95) ? sweep.maxP95 : null;
  // Ticks at swept values: at most six, evenly spread (as the report).
  const every = Math.max(1, Math.floor((xs.length + 5) / 6));
  const xTicks = xs.filter((_, i) => i % every === 0);
  container.appendChild(el('p', 'sweep-note',
    `Sweep of ${sweep.parameter} over ${xs.length} values, per placement: targeting correct (left) and time-to-flow p95 (right)` +
    `${bound !== null ? `; the dashed line is the p95 bound (${fmt.duration(bound)})` : ''}; the ringed point is the recommendation; bars are 95% intervals.`));
  for (const [placement, curves] of Object.entries(sweep.placements)) {
    if (!Array.isArray(curves)) continue;
    const rec = detail.recommendation?.[placement];
    const ranges = sweepRanges(curves, bound);
    const width = Math.max(container.clientWidth || 700, 360), height = 220, panelW = (width - 16) / 2;
    const figure = el('figure', 'sweep-figure', null, { 'data-placement': placement });
    const root = svg('svg', {
      class: 'chart sweep', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'data-placement': placement,
      'aria-label': `${placement}: targeting correct and time-to-flow p95 against ${sweep.parameter}`,
    });
    const panels = [
      { key: 'targetingCorrect', ci: 'targetingCorrectCI', title: `${placement} · targeting correct`, range: ranges.targetingCorrect, text: axisPercent },
      { key: 'timeToFlowP95', ci: 'timeToFlowP95CI', title: `${placement} · time to flow p95`, range: ranges.timeToFlowP95, text: fmt.axisDuration },
    ];
    panels.forEach((panel, n) => {
      const [lo, hi] = panel.range;
      const ox = n * (panelW + 16);
      const x = (v) => ox + PAD.left + ((v - xMin) / xSpan) * (panelW - PAD.left - PAD.right);
      const y = (v) => PAD.top + (1 - (v - lo) / (hi - lo || 1)) * (height - PAD.top - PAD.bottom);
      const g = svg('g', { class: 'grid-lines', 'data-panel': panel.key });
      for (let i = 0; i <= 4; i++) {
        const v = lo + ((hi - lo) * i) / 4;
        g.appendChild(svg('line', { x1: ox + PAD.left, x2: ox + panelW - PAD.right, y1: y(v), y2: y(v), class: 'gridline' }));
        g.appendChild(svg('text', { x: ox + PAD.left - 6, y: y(v) + 4, class: 'axis-label y-tick', 'text-anchor': 'end' }, panel.text(v)));
      }
      for (const v of xTicks) {
        g.appendChild(svg('text', { x: x(v), y: height - PAD.bottom + 16, class: 'axis-label x-tick', 'text-anchor': 'middle' }, `${+v.toFixed(2)}`));
      }
      g.appendChild(svg('text', { x: ox + PAD.left, y: PAD.top - 2, class: 'axis-title' }, panel.title));
      g.appendChild(svg('text', { x: ox + panelW / 2, y: height - 4, class: 'axis-title', 'text-anchor': 'middle' }, `${sweep.parameter} (s)`));
      root.appendChild(g);
      if (n === 1 && bound !== null) {
        const line = svg('line', { x1: ox + PAD.left, x2: ox + panelW - PAD.right, y1: y(bound), y2: y(bound), class: 'bound-line', 'stroke-dasharray': '5 4' });
        tooltip(line, `p95 bound: ${fmt.duration(bound)}`);
        root.appendChild(line);
      }
      curves.forEach((c, i) => {
        const pts = (c.points ?? []).filter((p) => Number.isFinite(p[panel.key]));
        if (!pts.length) return;
        const flat = pts.length === 1 && pts[0].value === null;
        const swept = pts.filter((p) => Number.isFinite(p.value));
        const d = flat
          ? `M${x(xMin).toFixed(1)},${y(pts[0][panel.key]).toFixed(1)} L${x(xMax).toFixed(1)},${y(pts[0][panel.key]).toFixed(1)}`
          : swept.map((p, k) => `${k ? 'L' : 'M'}${x(p.value).toFixed(1)},${y(p[panel.key]).toFixed(1)}`).join(' ');
        const path = svg('path', { d, class: `cdf-line series-${i % SERIES}`, 'data-strategy': c.strategy ?? '', 'stroke-dasharray': flat ? '2 3' : null });
        tooltip(path, `${c.strategy}${flat ? ` (${sweep.parameter} does not apply)` : ''}`);
        root.appendChild(path);
        if (!flat) {
          for (const p of swept) {
            const ci = Array.isArray(p[panel.ci]) && p[panel.ci].every(Number.isFinite) ? p[panel.ci] : null;
            if (ci) root.appendChild(svg('line', { x1: x(p.value), x2: x(p.value), y1: y(ci[0]), y2: y(ci[1]), class: `interval series-${i % SERIES}` }));
            const dot = svg('circle', { cx: x(p.value), cy: y(p[panel.key]), r: 2, class: `dot series-${i % SERIES}` });
            tooltip(dot, `${c.strategy} at ${p.value}: ${axisPercent(p.targetingCorrect)}, p95 ${fmt.duration(p.timeToFlowP95)}`);
            root.appendChild(dot);
          }
        }
        if (rec && rec.strategy === c.strategy) {
          const hit = flat ? pts[0] : pts.find((p) => p.value === (sweep.parameter === 'loadTimeout' ? rec.loadTimeout : rec[sweep.parameter]));
          if (hit) {
            const ring = svg('circle', { cx: x(flat ? xMin : hit.value), cy: y(hit[panel.key]), r: 7, class: 'recommended', fill: 'none', stroke: 'currentColor', 'stroke-width': 2 });
            tooltip(ring, `recommended: ${c.strategy}${flat ? '' : ` at ${hit.value}`}`);
            root.appendChild(ring);
          }
        }
      });
    });
    figure.appendChild(root);
    figure.appendChild(sweepLegend(curves, Boolean(rec)));
    container.appendChild(figure);
  }
}

/** The legend under a sweep chart: each strategy in its line's colour (dashed: not swept), and the ring. */
function sweepLegend(curves, recommended) {
  const list = el('ul', 'legend sweep-legend', null, { 'aria-label': 'Strategies' });
  curves.forEach((c, i) => {
    const flat = !(c.points ?? []).some((p) => Number.isFinite(p?.value));
    const li = el('li', null, null, { 'data-strategy': c.strategy ?? '' });
    li.appendChild(el('span', `swatch series-${i % SERIES}${flat ? ' dashed' : ''}`, null, { 'aria-hidden': 'true' }));
    li.appendChild(el('span', null, `${c.strategy ?? `strategy ${i + 1}`}${flat ? ' (not swept)' : ''}`));
    list.appendChild(li);
  });
  if (recommended) {
    const li = el('li', 'legend-recommended');
    li.appendChild(el('span', 'ring-mark', null, { 'aria-hidden': 'true' }));
    li.appendChild(el('span', null, 'recommended'));
    list.appendChild(li);
  }
  return list;
}

function metricCell(text, isBest) {
  const td = el('td', `num${isBest ? ' best' : ''}`, text);
  if (isBest) td.title = 'best of the strategies';
  return td;
}

function bestValues(list) {
  const pick = (values, better) => values.filter(Number.isFinite).reduce((a, b) => (a === null || better(b, a) ? b : a), null);
  return {
    targetingCorrect: pick(list.map((s) => s.targetingCorrect), (a, b) => a > b),
    p50: pick(list.map((s) => s.timeToFlow?.p50), (a, b) => a < b),
    p95: pick(list.map((s) => s.timeToFlow?.p95), (a, b) => a < b),
    p99: pick(list.map((s) => s.timeToFlow?.p99), (a, b) => a < b),
    requestsPerSession: pick(list.map((s) => s.requestsPerSession), (a, b) => a < b),
  };
}

const PAD = { left: 48, right: 16, top: 14, bottom: 36 };
const X_TICKS = [0, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120];

/** The time-to-flow CDF of each strategy on a square-root time axis (detail near zero, the tail still visible). */
function renderCDF(container, list) {
  const width = Math.max(container.clientWidth || 700, 360);
  const height = 280;
  // The axis ends past the largest p99: the last percent of a long tail would squash everything else.
  let max = 0;
  for (const s of list) {
    const p99 = s.timeToFlow?.p99;
    if (Number.isFinite(p99)) max = Math.max(max, p99);
    else for (const p of s.timeToFlowCDF ?? []) if (Array.isArray(p) && Number.isFinite(p[0])) max = Math.max(max, p[0]);
  }
  const xMax = X_TICKS.find((v) => v >= max * 1.1) ?? max * 1.1;
  const plotW = width - PAD.left - PAD.right;
  const plotH = height - PAD.top - PAD.bottom;
  const x = (v) => PAD.left + Math.sqrt(Math.min(Math.max(0, v), xMax) / (xMax || 1)) * plotW;
  const y = (share) => PAD.top + plotH - share * plotH;
  const root = svg('svg', {
    class: 'chart cdf', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': `Time to flow, cumulative share of displays, for ${list.length} strategies`,
  });
  const axes = svg('g', { class: 'grid-lines' });
  for (const v of [0, 0.25, 0.5, 0.75, 0.9, 1]) {
    axes.appendChild(svg('line', { x1: PAD.left, x2: width - PAD.right, y1: y(v), y2: y(v), class: 'gridline' }));
    axes.appendChild(svg('text', { x: PAD.left - 6, y: y(v) + 4, class: 'axis-label', 'text-anchor': 'end' }, `${Math.round(v * 100)}%`));
  }
  let lastX = -100;
  for (const v of X_TICKS.filter((t) => t <= xMax)) {
    const gx = x(v);
    axes.appendChild(svg('line', { x1: gx, x2: gx, y1: PAD.top, y2: PAD.top + plotH, class: 'gridline' }));
    if (gx - lastX > 34) {
      axes.appendChild(svg('text', { x: gx, y: PAD.top + plotH + 16, class: 'axis-label', 'text-anchor': 'middle' }, fmt.axisDuration(v)));
      lastX = gx;
    }
  }
  axes.appendChild(svg('text', { x: PAD.left + plotW / 2, y: height - 4, class: 'axis-title', 'text-anchor': 'middle' }, 'time to flow (square-root scale) · share of displays with a flow by then'));
  root.appendChild(axes);
  list.forEach((s, i) => {
    const points = (s.timeToFlowCDF ?? []).filter((p) => Array.isArray(p) && Number.isFinite(p[0]) && Number.isFinite(p[1]));
    if (!points.length) return;
    let d = `M${x(0).toFixed(1)},${y(0).toFixed(1)}`;
    for (const [sec, share] of points) d += ` L${x(sec).toFixed(1)},${y(share).toFixed(1)}`;
    const path = svg('path', { d, class: `cdf-line series-${i % SERIES}`, 'data-strategy': s.name ?? '' });
    tooltip(path, `${s.name}: p50 ${fmt.duration(s.timeToFlow?.p50)}, p95 ${fmt.duration(s.timeToFlow?.p95)}, p99 ${fmt.duration(s.timeToFlow?.p99)}`);
    root.appendChild(path);
  });
  container.appendChild(root);
}
