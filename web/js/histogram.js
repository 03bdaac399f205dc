// Histogram of fetch.end durations, stacked by source, with p50/p95 markers.
import { svg, tooltip, clear, ticks } from './svg.js';
import { SOURCES, sourceClass } from './placements.js';
import * as fmt from './format.js';

const PAD = { left: 44, right: 14, top: 26, bottom: 34 };

/** Nearest-rank percentile of sorted values (as the memory sink computes it). */
export function percentile(sorted, p) {
  if (!sorted.length) return null;
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1];
}

/**
 * Draws `samples` ([{duration, source, trace, placement}]) into `container`; returns {p50, p95, count, bins}.
 * With `onBin`, the bins are a listbox with one tab stop (`current`, a bin's index; else the bin where
 * `listed` starts): a click, Enter or Space calls `onBin(bin)` with `{index, lo, hi, last, samples}` (the
 * bin holds lo <= duration < hi; the last bin also every longer one), arrow keys move between bins.
 * `listed` ({lo, hi, last}, seconds) is the range whose calls are listed: it is highlighted as a range of
 * time, not as a bar, so that it stays where it is when new samples change the bins (see markListedRange);
 * the axis reaches at least its end.
 */
export function renderHistogram(container, samples, { onBin, current, listed = null, axisTitle = 'fetch.end duration' } = {}) {
  clear(container);
  if (!samples.length) return { p50: null, p95: null, count: 0, bins: [] };
  const width = Math.max(container.clientWidth || 480, 320);
  const height = 260;
  const sorted = samples.map((s) => s.duration).sort((a, b) => a - b);
  const p50 = percentile(sorted, 50);
  const p95 = percentile(sorted, 95);
  const max = sorted[sorted.length - 1];

  const plotW = width - PAD.left - PAD.right;
  const plotH = height - PAD.top - PAD.bottom;
  // A long tail would squash the body: past 2 × p95 the axis stops and the rest is counted in the last bin.
  const domain = max > p95 * 2.5 ? p95 * 2 : max;
  const tickTarget = Math.max(3, Math.floor(plotW / 80));
  let xt = ticks(Math.max(domain, 0.01), tickTarget);
  // The listed range stays on the axis, however the new samples moved it.
  if (listed && listed.hi > xt[xt.length - 1] * (1 + 1e-9)) xt = ticks(listed.hi, tickTarget);
  const xMax = xt[xt.length - 1];
  const binCount = Math.min(60, Math.max(12, Math.floor(plotW / 14)));
  const binW = xMax / binCount;
  const order = SOURCES.map(([k]) => k).concat(['other', 'error']);
  const bins = Array.from({ length: binCount }, (_, i) => ({
    index: i, lo: i * binW, hi: (i + 1) * binW, last: i === binCount - 1, total: 0, by: new Map(), samples: [],
  }));
  let beyond = 0;
  for (const s of samples) {
    if (s.duration > xMax) beyond += 1;
    // The bin whose edges (as drawn and as sent to the server) hold the duration: lo <= d < hi.
    let i = Math.max(0, Math.min(binCount - 1, Math.floor(s.duration / binW)));
    if (i > 0 && s.duration < bins[i].lo) i -= 1;
    else if (i < binCount - 1 && s.duration >= bins[i].hi) i += 1;
    bins[i].samples.push(s);
    const key = order.includes(s.source) ? s.source : 'other';
    bins[i].total += 1;
    bins[i].by.set(key, (bins[i].by.get(key) ?? 0) + 1);
  }
  const yMaxRaw = Math.max(...bins.map((b) => b.total));
  const yt = ticks(yMaxRaw, 4).filter((v) => Number.isInteger(v));
  const yMax = yt[yt.length - 1] || 1;
  const x = (v) => PAD.left + (v / xMax) * plotW;
  const y = (v) => PAD.top + plotH - (v / yMax) * plotH;

  const interactive = Boolean(onBin);
  const filled = bins.filter((b) => b.total > 0);
  const startsListed = (b) => listed && b.lo <= listed.lo + 1e-12 && (b.last || listed.lo < b.hi - 1e-12);
  const tabStop = interactive ? (filled.find((b) => b.index === current) ?? filled.find(startsListed) ?? filled[0])?.index : null;
  const root = svg('svg', {
    class: 'chart histogram', width, height, viewBox: `0 0 ${width} ${height}`, role: interactive ? 'listbox' : 'img',
    'aria-label': `Histogram of ${samples.length} call durations; p50 ${fmt.duration(p50)}, p95 ${fmt.duration(p95)}, max ${fmt.duration(max)}${interactive ? '; Enter on a bar lists its calls' : ''}`,
    'data-x-max': xMax, 'data-plot-left': PAD.left, 'data-plot-width': plotW, 'data-plot-top': PAD.top, 'data-plot-height': plotH,
  });
  const axes = svg('g', { class: 'grid-lines' });
  for (const v of yt) {
    axes.appendChild(svg('line', { x1: PAD.left, x2: width - PAD.right, y1: y(v), y2: y(v), class: 'gridline' }));
    axes.appendChild(svg('text', { x: PAD.left - 6, y: y(v) + 4, class: 'axis-label', 'text-anchor': 'end' }, fmt.compact(v)));
  }
  for (const v of xt) {
    axes.appendChild(svg('line', { x1: x(v), x2: x(v), y1: PAD.top + plotH, y2: PAD.top + plotH + 4, class: 'axis-line' }));
    axes.appendChild(svg('text', { x: x(v), y: PAD.top + plotH + 17, class: 'axis-label', 'text-anchor': 'middle' }, fmt.axisDuration(v)));
  }
  axes.appendChild(svg('line', { x1: PAD.left, x2: width - PAD.right, y1: PAD.top + plotH, y2: PAD.top + plotH, class: 'axis-line' }));
  axes.appendChild(svg('text', { x: PAD.left + plotW / 2, y: height - 3, class: 'axis-title', 'text-anchor': 'middle' }, axisTitle));
  root.appendChild(axes);

  const bars = svg('g', { class: 'bars' });
  bins.forEach((b, i) => {
    if (!b.total) return;
    const x0 = x(i * binW) + 1;
    const w = Math.max(x((i + 1) * binW) - x(i * binW) - 2, 1);
    let acc = 0;
    const g = svg('g', {
      class: 'bin', 'data-index': i, 'data-count': b.total, 'data-lo': b.lo, 'data-hi': b.last ? null : b.hi,
      role: interactive ? 'option' : null, tabindex: interactive ? (i === tabStop ? 0 : -1) : null,
      'aria-selected': interactive ? 'false' : null,
    });
    // A hit area the height of the plot, so that a short bar is as easy to click as a tall one.
    if (interactive) g.appendChild(svg('rect', { x: x0, y: PAD.top, width: w, height: plotH, class: 'bin-hit' }));
    for (const key of order) {
      const n = b.by.get(key);
      if (!n) continue;
      g.appendChild(svg('rect', { x: x0, y: y(acc + n), width: w, height: Math.max(y(acc) - y(acc + n), 0.5), class: `seg ${sourceClass(key)}` }));
      acc += n;
    }
    const parts = order.filter((k) => b.by.get(k)).map((k) => `${k} ${b.by.get(k)}`).join(', ');
    const upper = i === binCount - 1 && beyond ? 'and slower' : fmt.duration((i + 1) * binW);
    const label = `${fmt.duration(i * binW)} – ${upper}: ${b.total} call${b.total === 1 ? '' : 's'} (${parts})`;
    tooltip(g, label);
    if (interactive) {
      g.setAttribute('aria-label', label);
      g.addEventListener('click', () => onBin(b));
      g.addEventListener('focus', () => {
        for (const other of root.querySelectorAll('g.bin[tabindex="0"]')) if (other !== g) other.setAttribute('tabindex', '-1');
        g.setAttribute('tabindex', '0');
      });
      g.addEventListener('keydown', (event) => {
        if (event.key === 'Enter' || event.key === ' ') { event.preventDefault(); onBin(b); return; }
        const all = [...root.querySelectorAll('g.bin')];
        const at = all.indexOf(g);
        const to = { ArrowRight: at + 1, ArrowDown: at + 1, ArrowLeft: at - 1, ArrowUp: at - 1, Home: 0, End: all.length - 1 }[event.key];
        if (to === undefined) return;
        event.preventDefault();
        all[Math.max(0, Math.min(all.length - 1, to))].focus();
      });
    }
    bars.appendChild(g);
  });
  root.appendChild(bars);

  // Labels above the plot: p50 to the left of its line, p95 to the right; laid out once drawn (below).
  const marks = [];
  for (const [label, v] of [['p50', p50], ['p95', p95]]) {
    const mx = x(v);
    const m = svg('g', { class: `pmark ${label}` });
    m.appendChild(svg('line', { x1: mx, x2: mx, y1: PAD.top - 4, y2: PAD.top + plotH }));
    const text = svg('text', { x: mx, y: PAD.top - 8, 'text-anchor': 'start' }, `${label} ${fmt.duration(v)}`);
    m.appendChild(text);
    tooltip(m, `${label}: ${fmt.duration(v)}`);
    root.appendChild(m);
    marks.push({ text, mx, side: label === 'p50' ? -1 : 1 });
  }
  let over = null;
  if (beyond) {
    over = svg('text', { x: width - PAD.right, y: PAD.top - 8, class: 'axis-label over-label', 'text-anchor': 'end' },
      `+${beyond} over ${fmt.axisDuration(xMax)} (last bin)`);
    root.appendChild(over);
  }
  container.appendChild(root);
  placeMarkLabels(marks, over, width);
  markListedRange(root, listed);
  return { p50, p95, count: samples.length, bins };
}

/** A text's drawn width; its estimate (11 px tabular figures) while the chart is not laid out (hidden). */
function textWidth(text) {
  let w = 0;
  try { w = text.getComputedTextLength(); } catch { w = 0; }
  return w > 0 ? w : text.textContent.length * 6.6;
}

/**
 * Lays out the p50 and p95 labels on one line above the plot: p50's ends 4 px left of its marker,
 * p95's starts 4 px right of its own (each on the other side when the chart's edge is too near);
 * then, in order (p50, p95, the "+N over" note at the right), each is pushed left to end before the
 * next, and right to start after the one before, inside the chart. Close markers (one call: p50 =
 * p95) thus get labels side by side, never over each other. Only when the line is too short for all
 * of them does p95's go one line down.
 */
function placeMarkLabels(marks, over, width) {
  const GAP = 10, MIN = 2, MAX = width - 2;
  const boxes = marks.map(({ text, mx, side }) => {
    const w = textWidth(text);
    // On its own side of the marker, or on the other when the chart's edge is too near.
    const left = mx - 4 - w, right = mx + 4;
    const start = side < 0 ? (left >= MIN ? left : right) : (right + w <= MAX ? right : left);
    return { text, w, start };
  });
  if (over) boxes.push({ text: over, w: textWidth(over), start: Number(over.getAttribute('x')) - textWidth(over), fixed: true });
  // Right to left: each ends before the next starts (the last inside the chart).
  for (let i = boxes.length - 1; i >= 0; i -= 1) {
    const limit = i === boxes.length - 1 ? MAX : boxes[i + 1].start - GAP;
    if (!boxes[i].fixed && boxes[i].start + boxes[i].w > limit) boxes[i].start = limit - boxes[i].w;
  }
  // Left to right: each starts after the one before ends (the first inside the chart).
  for (let i = 0; i < boxes.length; i += 1) {
    const limit = i === 0 ? MIN : boxes[i - 1].start + boxes[i - 1].w + GAP;
    if (!boxes[i].fixed && boxes[i].start < limit) boxes[i].start = limit;
  }
  const fits = boxes.every((b, i) => b.start >= MIN - 0.01 && b.start + b.w <= MAX + 0.01
    && (i === 0 || b.start >= boxes[i - 1].start + boxes[i - 1].w + GAP - 0.01));
  for (const [i, b] of boxes.entries()) {
    if (b.fixed) continue;
    b.text.setAttribute('x', String(b.start));
    b.text.setAttribute('text-anchor', 'start');
    if (!fits && i === 1) {
      // No room on one line: p95's label one line down, inside the chart.
      const start = Math.min(Math.max(MIN, marks[1].mx + 4), MAX - b.w);
      b.text.setAttribute('x', String(start));
      b.text.setAttribute('y', String(Number(b.text.getAttribute('y')) + 14));
    }
  }
}

/**
 * Highlights the listed range `listed` ({lo, hi, last}: lo <= duration < hi, or every duration from lo
 * when `last`) on a drawn histogram, without redrawing it: a band over exactly that span of the axis
 * (`.listed-range[data-lo][data-hi]`, behind the bars). The bar whose edges are the range's (the chart
 * not rescaled since) is the selected option. Null removes the highlight.
 */
export function markListedRange(root, listed) {
  if (!root) return;
  root.querySelector('.listed-range')?.remove();
  const near = (a, b) => Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(a), Math.abs(b));
  for (const g of root.querySelectorAll('g.bin')) {
    const on = Boolean(listed) && near(Number(g.dataset.lo), listed.lo)
      && (listed.last ? g.dataset.hi === undefined : g.dataset.hi !== undefined && near(Number(g.dataset.hi), listed.hi));
    g.classList.toggle('open', on);
    if (g.hasAttribute('aria-selected')) g.setAttribute('aria-selected', String(on));
  }
  if (!listed) return;
  const xMax = Number(root.dataset.xMax);
  const left = Number(root.dataset.plotLeft);
  const plotW = Number(root.dataset.plotWidth);
  const x = (v) => left + (Math.min(Math.max(v, 0), xMax) / xMax) * plotW;
  const x0 = x(listed.lo);
  const x1 = listed.last ? left + plotW : x(listed.hi);
  const range = listed.last ? `${fmt.duration(listed.lo)} or longer` : `${fmt.duration(listed.lo)} to ${fmt.duration(listed.hi)}`;
  const band = svg('rect', {
    x: x0, y: Number(root.dataset.plotTop), width: Math.max(x1 - x0, 1), height: Number(root.dataset.plotHeight),
    class: 'listed-range', 'data-lo': listed.lo, 'data-hi': listed.last ? null : listed.hi, 'aria-hidden': 'true',
  });
  tooltip(band, `Listed below: the calls of ${range}`);
  root.insertBefore(band, root.querySelector('g.bars'));
}
