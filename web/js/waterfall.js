// The waterfall of recent calls, like a browser's network panel: one group per trace, the call's bar
// (fetch.start/preload.start .. fetch.end/preload.end) and below it its requests by span, with
// timeout marks and fallback marks. Every call is drawn from its own start on a shared time scale.
import { svg, tooltip, el, clear, ticks } from './svg.js';
import { sourceClass } from './placements.js';
import * as fmt from './format.js';

const AXIS_H = 24;
const CALL_H = 24;
const REQ_H = 18;
const GAP = 6;
const RIGHT_PAD = 76;

/** Fills the waterfall legend. */
export function renderWaterfallLegend(list) {
  clear(list);
  const items = [
    ['swatch src-network', 'Call (by source)'],
    ['swatch out-ok', 'Request ok'],
    ['swatch out-failed', 'Request failed'],
    ['swatch out-timeout', 'Request timed out'],
    ['swatch budget', 'Request budget'],
    ['mark timeout-mark', 'Timeout'],
    ['mark fallback-mark', 'Fallback'],
  ];
  for (const [cls, label] of items) {
    const li = el('li');
    li.appendChild(el('span', cls, null, { 'aria-hidden': 'true' }));
    li.appendChild(el('span', null, label));
    list.appendChild(li);
  }
}

function truncate(text, max) {
  const s = String(text ?? '');
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

function outcomeClass(outcome, ended) {
  if (!ended) return 'out-pending';
  if (outcome === 'ok') return 'out-ok';
  if (outcome === 'timeout') return 'out-timeout';
  return 'out-failed';
}

function callEnd(c) {
  if (c.endT !== null && c.endT !== undefined) return c.endT;
  const last = Number.isFinite(c.lastT) ? c.lastT : c.startT;
  return Number.isFinite(c.openUntil) ? Math.max(c.openUntil, last) : last;
}

/**
 * Draws `calls` (from groupCalls, newest first) into `container`. `onSelect(trace)` is called when a
 * call is clicked or activated with the keyboard; `selected` is the trace to highlight. With `onSelect`
 * the chart is a listbox of calls with one tab stop (`current`, else the first call); arrow keys, Home
 * and End move between calls and `onCurrent(trace)` hears where the focus went. `fit` draws a single
 * call on its own scale, budgets included, as a picture (no tab stops).
 */
export function renderWaterfall(container, calls, { onSelect, onCurrent, selected, current, fit = false, zoom = null, onZoom } = {}) {
  clear(container);
  if (!calls.length) return null;
  const available = container.clientWidth || 900;
  // Narrow screens: a narrower label column, and the chart scrolls sideways below 480 px.
  const LABEL_W = available < 760 ? 230 : 340;
  const width = Math.max(available, 480);
  const trackX = LABEL_W;
  const trackW = width - LABEL_W - RIGHT_PAD;

  const spans = [];
  for (const c of calls) {
    let span = callEnd(c) - c.startT;
    for (const r of c.requests) {
      span = Math.max(span, (r.endT ?? r.openUntil ?? r.startT) - c.startT);
      if (fit && Number.isFinite(r.timeout) && r.timeout > 0) span = Math.max(span, r.startT - c.startT + r.timeout);
    }
    if (fit) for (const m of [...c.timeouts, ...c.fallbacks]) span = Math.max(span, m.t - c.startT);
    spans.push(span);
  }
  const maxSpan = Math.max(0, ...spans);
  // The axis fits the visible calls: one very long call must not squash the others. Past 1.5 × p90
  // of the calls' spans the axis stops; longer calls are drawn to its end and marked cut (»).
  let axisEnd = maxSpan;
  if (!fit && spans.length >= 2) {
    const sorted = [...spans].sort((a, b) => a - b);
    const p90 = sorted[Math.max(0, Math.ceil(0.9 * sorted.length) - 1)];
    if (p90 > 0 && maxSpan > 1.5 * p90) axisEnd = 1.5 * p90;
  }
  const target = Math.max(3, Math.floor(trackW / 110));
  const zoomed = !fit && Array.isArray(zoom) && zoom[1] > zoom[0];
  const axisMin = zoomed ? zoom[0] : 0;
  const fitTicks = ticks(Math.max(axisEnd, 0.05), target);
  const axisTicks = zoomed ? ticksIn(zoom[0], zoom[1], target) : fitTicks;
  const axisMax = zoomed ? zoom[1] : axisTicks[axisTicks.length - 1];
  const past = (dt) => dt > axisMax + 1e-9;
  const x = (dt) => trackX + ((Math.min(Math.max(dt, axisMin), axisMax) - axisMin) / (axisMax - axisMin)) * trackW;
  const interactive = Boolean(onSelect);
  const tabStop = interactive ? (calls.some((c) => c.trace === current) ? current : calls[0].trace) : null;
  const cutCount = spans.filter(past).length;

  let height = AXIS_H + 4;
  for (const c of calls) height += CALL_H + c.requests.length * REQ_H + GAP;

  const root = svg('svg', {
    class: `chart waterfall${fit ? ' fit' : ''}`, width, height, viewBox: `0 0 ${width} ${height}`, role: interactive ? 'listbox' : 'img',
    'aria-label': fit ? `The call on its own time scale, up to ${fmt.duration(axisMax)}`
      : `Waterfall of the ${calls.length} most recent calls, time from each call's start, ${zoomed ? `zoomed to ${fmt.duration(axisMin)} – ` : 'up to '}${fmt.duration(axisMax)}${cutCount ? `; ${cutCount} longer call(s) cut at the axis end, marked »` : ''}; arrow keys move, Enter opens a call, + and − zoom the axis`,
    'data-axis-min': axisMin, 'data-axis-max': axisMax, 'data-fit-max': fitTicks[fitTicks.length - 1], 'data-cut': cutCount,
  });

  // Axis and grid.
  const grid = svg('g', { class: 'grid-lines' });
  for (const v of axisTicks) {
    const gx = x(v);
    grid.appendChild(svg('line', { x1: gx, x2: gx, y1: AXIS_H - 4, y2: height, class: 'gridline' }));
    grid.appendChild(svg('text', { x: gx, y: 14, class: 'axis-label', 'text-anchor': v === 0 ? 'start' : 'middle' }, fmt.axisDuration(v)));
  }
  grid.appendChild(svg('text', { x: 8, y: 14, class: 'axis-label' }, 'call'));
  grid.appendChild(svg('line', { x1: 0, x2: width, y1: AXIS_H, y2: AXIS_H, class: 'axis-line' }));
  root.appendChild(grid);
  if (onZoom && !fit) root.appendChild(zoomHandle(root, { trackX, trackW, axisMin, axisMax, onZoom }));

  let y = AXIS_H + 4;
  const tails = []; // the labels after call bars, kept inside the chart once drawn (fitTailLabels)
  for (const c of calls) {
    const rows = 1 + c.requests.length;
    const groupH = CALL_H + c.requests.length * REQ_H;
    const g = svg('g', {
      class: `wf-call${c.trace === selected ? ' selected' : ''}`, 'data-trace': c.trace, 'data-placement': c.placement ?? '',
      'data-source': c.errorCode !== null && c.errorCode !== undefined ? 'error' : (c.source ?? ''), 'data-call': c.call ?? '',
      tabindex: interactive ? (c.trace === tabStop ? 0 : -1) : null, role: interactive ? 'option' : null,
      'aria-selected': interactive ? String(c.trace === selected) : null,
    });
    const end = callEnd(c);
    const finished = c.endT !== null && c.endT !== undefined;
    const state = c.errorCode !== null && c.errorCode !== undefined ? `error ${fmt.errorCode(c.errorCode)}`
      : c.failed && Object.keys(c.failed).length ? `${Object.keys(c.failed).length} failed`
        : finished ? (c.source ?? 'done') : 'in progress';
    const summary = `${c.call ?? 'call'} ${c.placement ?? (c.placements ? c.placements.join(', ') : '')}: ${state}, ${fmt.duration(end - c.startT)}${c.targetingLost ? ', targeting lost' : ''}${audienceLabel(c) ? `, ${audienceLabel(c)}` : ''}, ${c.requests.length} request(s), ${c.timeouts.length} timeout(s), ${c.fallbacks.length} fallback(s). Started ${fmt.clock(c.startTs)}; run ${c.run}`;
    g.setAttribute('aria-label', summary);
    tooltip(g, summary);

    g.appendChild(svg('rect', { x: 0, y: y - 2, width, height: groupH + 2, class: 'row-bg' }));

    // Label column: status dot, placement, call, duration.
    const status = c.errorCode !== null && c.errorCode !== undefined ? 'src-error'
      : finished ? sourceClass(c.source ?? (c.failed && Object.keys(c.failed).length ? 'error' : 'network')) : 'out-pending';
    g.appendChild(svg('circle', { cx: 12, cy: y + CALL_H / 2 - 1, r: 4, class: status }));
    const name = c.placement ?? (c.placements ? `${c.placements.length} placements` : '—');
    g.appendChild(svg('text', { x: 24, y: y + CALL_H / 2 + 3, class: 'wf-name' }, truncate(name, 22)));
    const kindX = 24 + Math.min(name.length, 22) * 7.6 + 8;
    const kindChars = Math.max(4, Math.floor((LABEL_W - 72 - kindX) / 6.4));
    const kind = [c.call ?? '', audienceLabel(c)].filter(Boolean).join(' · ');
    g.appendChild(svg('text', { x: kindX, y: y + CALL_H / 2 + 3, class: 'wf-call-kind' }, truncate(kind, kindChars)));
    g.appendChild(svg('text', { x: LABEL_W - 10, y: y + CALL_H / 2 + 3, class: 'wf-dur', 'text-anchor': 'end' }, finished ? fmt.duration(end - c.startT) : '…'));

    // Call bar.
    const barCls = c.errorCode !== null && c.errorCode !== undefined ? 'src-error' : finished ? sourceClass(c.source ?? (c.failed && Object.keys(c.failed).length ? 'error' : 'network')) : 'out-pending';
    const bx = x(0);
    const bw = Math.max(x(end - c.startT) - bx, 2);
    g.appendChild(svg('rect', { x: bx, y: y + 5, width: bw, height: CALL_H - 12, rx: 2, class: `wf-bar call ${barCls}` }));
    const hasError = c.errorCode !== null && c.errorCode !== undefined;
    const failedCount = Object.keys(c.failed || {}).length;
    const outcome = !finished ? 'in progress'
      : hasError ? `error ${fmt.errorCode(c.errorCode)}`
        : c.call === 'preloadFlows' ? `${c.succeeded ?? 0} ok, ${failedCount} failed${failedCount ? ` (${Object.entries(c.failed).map(([p, code]) => `${p} ${code}`).join(', ')})` : ''}`
          : (c.source ?? 'done');
    const callCut = past(end - c.startT);
    if (callCut) {
      // Longer than the axis: drawn to its end, with the full duration after a » mark.
      g.classList.add('cut');
      g.dataset.cut = 'true';
      const cutLabel = svg('text', { x: bx + bw + 4, y: y + CALL_H / 2 + 3, class: `wf-bar-label wf-cut${hasError || failedCount ? ' bad' : ''}` }, `» ${fmt.duration(end - c.startT)}`);
      tooltip(cutLabel, `${outcome}, ${fmt.duration(end - c.startT)}: longer than the axis (${fmt.duration(axisMax)})`);
      g.appendChild(cutLabel);
    } else {
      const tail = svg('text', { x: bx + bw + 6, y: y + CALL_H / 2 + 3, class: `wf-bar-label${hasError || failedCount ? ' bad' : ''}` }, outcome);
      if (c.targetingLost) tail.appendChild(svg('tspan', { class: 'wf-flag', dx: 8 }, 'targeting lost'));
      g.appendChild(tail);
      tails.push({ text: tail, barEnd: bx + bw });
    }

    // Requests.
    let ry = y + CALL_H;
    for (const r of c.requests) {
      const ended = r.endT !== null && r.endT !== undefined;
      const label = `${r.kind ?? 'request'}${c.call === 'preloadFlows' && r.placement ? ` · ${r.placement}` : ''}`;
      g.appendChild(svg('text', { x: 36, y: ry + REQ_H / 2 + 3, class: 'wf-req-name' }, truncate(`↳ ${label}`, 30)));
      const rdur = (ended ? r.endT : Math.max(r.openUntil ?? end, r.startT)) - r.startT;
      const outcomeText = ended ? `${r.outcome ?? '?'}${r.status ? ` ${r.status}` : ''}` : 'pending';
      g.appendChild(svg('text', { x: LABEL_W - 10, y: ry + REQ_H / 2 + 3, class: `wf-req-out ${outcomeClass(r.outcome, ended)}-text`, 'text-anchor': 'end' }, outcomeText));
      const rx = x(r.startT - c.startT);
      if (Number.isFinite(r.timeout) && r.timeout > 0) {
        const budgetEnd = Math.min(x(r.startT - c.startT + r.timeout), trackX + trackW);
        const budget = svg('rect', { x: rx, y: ry + 4, width: Math.max(budgetEnd - rx, 1), height: REQ_H - 8, rx: 1.5, class: 'wf-budget' });
        tooltip(budget, `budget ${fmt.duration(r.timeout)}`);
        g.appendChild(budget);
        if (past(r.startT - c.startT + r.timeout)) {
          // The budget runs on past the axis: an arrow head at the axis end says so.
          const ex = trackX + trackW;
          const mark = svg('path', { d: `M${ex},${ry + 3} L${ex + 6},${ry + REQ_H / 2} L${ex},${ry + REQ_H - 3} Z`, class: 'wf-budget-cut' });
          tooltip(mark, `budget ${fmt.duration(r.timeout)}: runs past the axis`);
          g.appendChild(mark);
        }
      }
      const rw = Math.max(x(r.startT - c.startT + rdur) - rx, 2);
      const rect = svg('rect', { x: rx, y: ry + 4, width: rw, height: REQ_H - 8, rx: 1.5, class: `wf-bar req ${outcomeClass(r.outcome, ended)}` });
      tooltip(rect, `${label}: ${outcomeText}, ${fmt.duration(rdur)}${Number.isFinite(r.timeout) ? ` (budget ${fmt.duration(r.timeout)})` : ''}${r.bytes ? `, ${fmt.count(r.bytes)} bytes` : ''}; span ${r.span ?? '?'}`);
      g.appendChild(rect);
      const reqCut = past(r.startT - c.startT + rdur);
      g.appendChild(svg('text', { x: rx + rw + (reqCut ? 4 : 6), y: ry + REQ_H / 2 + 3, class: `wf-bar-label small${reqCut ? ' wf-cut' : ''}` }, `${reqCut ? '» ' : ''}${fmt.duration(rdur)}${ended ? '' : '…'}`));
      ry += REQ_H;
    }

    // Timeout and fallback marks, across the whole group.
    for (const t of c.timeouts) {
      const mx = x(t.t - c.startT);
      const m = svg('g', { class: 'timeout-mark' });
      m.appendChild(svg('line', { x1: mx, x2: mx, y1: y + 1, y2: y + groupH - 2 }));
      m.appendChild(svg('path', { d: `M${mx - 4},${y + 1} L${mx + 4},${y + 1} L${mx},${y + 7} Z` }));
      tooltip(m, `timeout (${t.stage ?? '?'}) at +${fmt.duration(t.t - c.startT)}${Number.isFinite(t.budget) ? `, budget ${fmt.duration(t.budget)}` : ''}`);
      g.appendChild(m);
    }
    for (const f of c.fallbacks) {
      const mx = x(f.t - c.startT);
      const my = y + CALL_H / 2 - 1;
      const m = svg('g', { class: 'fallback-mark' });
      m.appendChild(svg('path', { d: `M${mx},${my - 5} L${mx + 5},${my} L${mx},${my + 5} L${mx - 5},${my} Z` }));
      tooltip(m, `fallback to ${f.to ?? '?'} (${f.reason ?? '?'}) at +${fmt.duration(f.t - c.startT)}`);
      g.appendChild(m);
    }

    if (interactive) {
      // The trace comes from the node the user is on, never from a position.
      g.addEventListener('click', () => onSelect(g.dataset.trace));
      g.addEventListener('focus', () => {
        for (const other of root.querySelectorAll('g.wf-call[tabindex="0"]')) if (other !== g) other.setAttribute('tabindex', '-1');
        g.setAttribute('tabindex', '0');
        onCurrent?.(g.dataset.trace);
      });
      g.addEventListener('keydown', (event) => {
        if (event.key === 'Enter' || event.key === ' ') { event.preventDefault(); onSelect(g.dataset.trace); return; }
        const rows = [...root.querySelectorAll('g.wf-call')];
        const i = rows.indexOf(g);
        const to = { ArrowDown: i + 1, ArrowUp: i - 1, Home: 0, End: rows.length - 1 }[event.key];
        if (to === undefined) return;
        event.preventDefault();
        rows[Math.max(0, Math.min(rows.length - 1, to))].focus();
      });
    }
    root.appendChild(g);
    y += groupH + GAP;
    void rows;
  }
  container.appendChild(root);
  fitTailLabels(tails, width);
  return root;
}

/**
 * A call's label (its outcome, TARGETING LOST) goes after its bar; when that would run past the
 * chart's right edge (a bar reaching the axis end, as a single call's does), it ends inside the bar
 * instead, on a halo of the panel's colour (class `inside`), so that it is never clipped.
 */
function fitTailLabels(tails, width) {
  const right = width - 4;
  for (const { text, barEnd } of tails) {
    let w = 0;
    try { w = text.getBBox().width; } catch { w = 0; }
    // Not laid out (a hidden panel): estimated from its text (uppercase flag letters are wider).
    if (!(w > 0)) w = [...text.childNodes].reduce((n, node) => n + (node.nodeType === 3 ? node.textContent.length * 6.4 : node.textContent.length * 8 + 8), 0);
    if (Number(text.getAttribute('x')) + w <= right) continue;
    text.setAttribute('x', String(Math.min(barEnd - 6, right)));
    text.setAttribute('text-anchor', 'end');
    text.classList.add('inside');
  }
}

/** Tick values from `lo` to `hi` in steps of 1, 2, 2.5 or 5 times a power of ten. */
function ticksIn(lo, hi, target) {
  const raw = (hi - lo) / target;
  const pow = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * pow).find((s) => s >= raw) ?? 10 * pow;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/**
 * A strip over the axis: dragging across it selects a time span, and `onZoom(from, to)` (seconds from
 * the calls' starts) gets it when the pointer is released.
 */
function zoomHandle(root, { trackX, trackW, axisMin, axisMax, onZoom }) {
  const g = svg('g', { class: 'wf-zoom' });
  const hit = svg('rect', { x: trackX, y: 0, width: trackW, height: AXIS_H, class: 'wf-zoom-hit' });
  tooltip(hit, 'Drag across the axis to zoom in');
  const band = svg('rect', { x: trackX, y: 0, width: 0, height: AXIS_H, class: 'wf-zoom-band', visibility: 'hidden' });
  g.appendChild(band);
  g.appendChild(hit);
  const at = (event) => Math.min(Math.max(event.clientX - root.getBoundingClientRect().left, trackX), trackX + trackW);
  const time = (px) => axisMin + ((px - trackX) / trackW) * (axisMax - axisMin);
  let start = null;
  hit.addEventListener('pointerdown', (event) => {
    start = at(event);
    hit.setPointerCapture?.(event.pointerId);
    event.preventDefault();
  });
  hit.addEventListener('pointermove', (event) => {
    if (start === null) return;
    const now = at(event);
    band.setAttribute('x', String(Math.min(start, now)));
    band.setAttribute('width', String(Math.abs(now - start)));
    band.setAttribute('visibility', 'visible');
  });
  const finish = (event) => {
    if (start === null) return;
    const end = at(event);
    const from = start;
    start = null;
    band.setAttribute('visibility', 'hidden');
    if (Math.abs(end - from) >= 4) onZoom(time(Math.min(from, end)), time(Math.max(from, end)));
  };
  hit.addEventListener('pointerup', finish);
  hit.addEventListener('pointercancel', () => { start = null; band.setAttribute('visibility', 'hidden'); });
  return g;
}

/** "audience / variation" of a finished getFlow call, or ''. */
function audienceLabel(c) {
  return [c.audience, c.variation].filter((v) => typeof v === 'string' && v).join(' / ');
}

/**
 * Fills the call detail panel with one call: its stages, requests with their budgets, timeouts and
 * fallbacks on the call's own time scale, then every event of the call.
 */
export function renderTraceDetail(panel, call) {
  const tbody = panel.querySelector('tbody');
  clear(tbody);
  const chart = panel.querySelector('.trace-detail-chart');
  if (!call) { panel.hidden = true; delete panel.dataset.trace; if (chart) clear(chart); return; }
  panel.hidden = false;
  panel.dataset.trace = call.trace;
  const who = audienceLabel(call);
  const title = `${call.call ?? 'call'} ${call.placement ?? (call.placements ?? []).join(', ')}${who ? ` · ${who}` : ''} · trace ${call.trace}`;
  panel.querySelector('h3').textContent = title;
  panel.querySelector('h3').title = title;
  if (chart) renderWaterfall(chart, [call], { fit: true });
  for (const e of call.events) {
    const tr = el('tr', `ev ${eventClass(e.name)}`);
    // Every cell one line, cut with an ellipsis; the whole value is its title.
    const attrs = fmt.attrs(e.attrs);
    tr.appendChild(el('td', 'num mono', Number.isFinite(e.t) ? `+${fmt.duration(e.t - call.startT)}` : ''));
    tr.appendChild(el('td', 'mono ev-name', e.name, { title: e.name }));
    tr.appendChild(el('td', 'mono', e.placement ?? '', { title: e.placement ?? '' }));
    tr.appendChild(el('td', 'mono muted', e.span ?? '', { title: e.span ?? '' }));
    tr.appendChild(el('td', 'mono attrs', attrs, { title: attrs }));
    tbody.appendChild(tr);
  }
}

/** A CSS class for an event name's colour in tables. */
export function eventClass(name) {
  if (name === 'timeout' || name === 'attribution.timeout' || name === 'cache.corrupt' || name === 'sink.dropped') return 'ev-bad';
  if (name === 'fallback' || name === 'cache.expired' || name === 'param.clamped') return 'ev-warn';
  if (name.startsWith('fetch.') || name.startsWith('preload.')) return 'ev-call';
  if (name.startsWith('request.')) return 'ev-req';
  if (name.startsWith('cache.') || name.startsWith('layout.')) return 'ev-cache';
  return 'ev-other';
}
