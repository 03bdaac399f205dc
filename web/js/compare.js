// Two runs, or two time ranges of one, side by side: per placement, the calls, p50, p95, errors,
// targeting lost and sources of the selected run (A) and of another one (B) with the difference, and
// both sides' time to flow overlaid. Every number is the server's read model (GET /api/placements and
// /api/calls of each side, with its from and to).
import * as api from './api.js';
import * as fmt from './format.js';
import { el, clear, svg, tooltip, setText, setHidden } from './svg.js';
import { COMPARE_RANGE as RANGE_KEYS } from './url.js';

/** Milliseconds between refreshes while a comparison is shown. */
const REFRESH_MS = 5000;
const BINS = 24;
const SOURCES = ['network', 'cache', 'defaultAudience', 'fallbackFile'];

/** B is the selected run itself, over another time range. */
export const SAME_RUN = '@same';

/**
 * The panel in `section`. `current()` is the selected run ('' for all runs), `paused()` whether the
 * page is paused, `onChange()` is called when the user picks another run or range to compare with.
 * Returns {setRuns(runs), set(run, ranges), value(), ranges(), refresh()}.
 */
export function createCompare(section, { current, paused, onChange }) {
  const select = section.querySelector('#compare-run');
  const note = section.querySelector('#compare-note');
  const table = section.querySelector('table');
  const body = section.querySelector('tbody');
  const chart = section.querySelector('.chart-wrap');
  const empty = section.querySelector('.panel-empty');
  const inputs = Object.fromEntries(RANGE_KEYS.map((key) => [key, section.querySelector(`#compare-${key}`)]));
  const rangesRow = section.querySelector('.compare-ranges');
  let other = '';
  let range = Object.fromEntries(RANGE_KEYS.map((key) => [key, '']));
  let shown = '';
  let runs = [];
  let generation = 0;
  let typing = null;

  select.addEventListener('change', () => {
    other = select.value;
    onChange();
    refresh();
  });
  for (const key of RANGE_KEYS) {
    inputs[key].addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(() => {
        range = Object.fromEntries(RANGE_KEYS.map((k) => [k, inputs[k].value.trim()]));
        onChange();
        refresh();
      }, 400);
    });
  }
  setInterval(() => { if (other && !paused()) refresh(); }, REFRESH_MS);

  /** The runs to offer: every listed run but the selected one. */
  function setRuns(list) {
    runs = list.map((r) => r.id).filter((id) => typeof id === 'string');
    fillSelect();
  }

  function fillSelect() {
    const ids = runs.filter((id) => id !== current());
    if (other && !ids.includes(other)) ids.unshift(other);
    const wanted = ['', SAME_RUN, ...ids];
    const have = [...select.options].map((o) => o.value);
    if (JSON.stringify(have) !== JSON.stringify(wanted)) {
      clear(select);
      select.appendChild(new Option('no other run', ''));
      select.appendChild(new Option('this run, another time range', SAME_RUN));
      for (const id of ids) select.appendChild(new Option(id, id));
    }
    select.value = other;
    setHidden(rangesRow, !other);
  }

  /** Compares with `run` ('' or null: no comparison; SAME_RUN: the selected run) over `ranges`, as a URL asks. */
  function set(run, ranges = {}) {
    other = run ?? '';
    range = Object.fromEntries(RANGE_KEYS.map((key) => [key, ranges[key] ?? '']));
    for (const key of RANGE_KEYS) inputs[key].value = range[key];
    fillSelect();
    refresh();
  }

  async function refresh() {
    fillSelect();
    const a = current(), b = other === SAME_RUN ? current() : other;
    const mine = ++generation;
    section.dataset.compare = b;
    if (!b) {
      shown = '';
      setHidden(table, true);
      clear(chart);
      setHidden(empty, false);
      setText(empty, 'Pick a run to compare the selected one with.');
      setText(note, '');
      return;
    }
    const sideA = { from: range.aFrom || null, to: range.aTo || null };
    const sideB = { from: range.bFrom || null, to: range.bTo || null };
    let answers;
    try {
      answers = await Promise.all([
        api.placements(a || null, sideA), api.placements(b || null, sideB),
        api.calls({ run: a || null, limit: 1, ...sideA }), api.calls({ run: b || null, limit: 1, ...sideB }),
      ]);
    } catch (error) {
      if (mine !== generation) return;
      // Said where the comparison would be, not as "no calls".
      shown = '';
      setText(note, '');
      setHidden(table, true);
      clear(chart);
      setHidden(empty, false);
      setText(empty, `Could not load the comparison: ${error.message}`);
      return;
    }
    if (mine !== generation) return;
    const [pa, pb, ca, cb] = answers;
    const key = JSON.stringify([a, b, range, pa.placements, pb.placements, ca.stats, cb.stats]);
    if (key === shown) return;
    shown = key;
    render(side(a, range.aFrom, range.aTo), side(b, range.bFrom, range.bTo), pa, pb, ca.stats ?? {}, cb.stats ?? {});
  }

  /** A side's name: its run, and its time range when it has one. */
  function side(run, from, to) {
    const name = run || 'all runs';
    if (!from && !to) return name;
    return `${name}, ${from ? `from ${from}` : ''}${from && to ? ' ' : ''}${to ? `to ${to}` : ''}`;
  }

  function render(nameA, nameB, pa, pb, sa, sb) {
    setText(note, `A: ${nameA} · B: ${nameB} · B minus A`);
    const rowsA = byPlacement(pa.placements), rowsB = byPlacement(pb.placements);
    const names = [...new Set([...rowsA.keys(), ...rowsB.keys()])].sort();
    clear(body);
    for (const name of names) body.appendChild(row(name, rowsA.get(name), rowsB.get(name)));
    setHidden(table, names.length === 0);
    setHidden(empty, names.length > 0);
    setText(empty, 'Neither run has calls yet.');
    drawHistograms(chart, nameA, nameB, durations(sa), durations(sb));
  }

  return { setRuns, set, value: () => other, ranges: () => ({ ...range }), refresh };
}

function byPlacement(list) {
  const map = new Map();
  for (const p of Array.isArray(list) ? list : []) if (typeof p.placement === 'string') map.set(p.placement, p);
  return map;
}

function durations(stats) {
  return (Array.isArray(stats.durations) ? stats.durations : []).map((d) => d[0]).filter(Number.isFinite);
}

/** One placement's row: each metric as A → B with B minus A under it. */
function row(name, a, b) {
  const tr = el('tr', null, null, { 'data-placement': name });
  tr.appendChild(el('th', 'mono clip', name, { scope: 'row', title: name }));
  const cells = [
    ['calls', (p) => p?.calls, fmt.count],
    ['p50', (p) => p?.duration?.p50, fmt.duration],
    ['p95', (p) => p?.duration?.p95, fmt.duration],
    ['errors', (p) => p?.errors, fmt.count],
    ['targetingLost', (p) => p?.targetingLost, fmt.count],
  ];
  for (const [metric, read, format] of cells) {
    const va = read(a), vb = read(b);
    const td = el('td', 'num', null, { 'data-metric': metric, 'data-a': va ?? '', 'data-b': vb ?? '' });
    td.appendChild(el('span', null, `${show(va, format)} → ${show(vb, format)}`));
    const delta = Number.isFinite(va) && Number.isFinite(vb) ? vb - va : null;
    td.dataset.delta = delta ?? '';
    td.appendChild(el('span', 'cell-sub', delta === null ? '–' : signed(delta, format)));
    tr.appendChild(td);
  }
  const sources = el('td', 'compare-sources', null, { 'data-metric': 'sources' });
  const text = SOURCES.map((s) => {
    const sa = share(a, s), sb = share(b, s);
    return sa === null && sb === null ? null : `${s} ${sa === null ? '–' : `${sa}%`} → ${sb === null ? '–' : `${sb}%`}`;
  }).filter(Boolean).join(' · ');
  sources.appendChild(el('span', 'clip', text || '–', { title: text }));
  tr.appendChild(sources);
  return tr;
}

function show(value, format) {
  return Number.isFinite(value) ? format(value) : '–';
}

function signed(delta, format) {
  if (delta === 0) return '±0';
  return `${delta > 0 ? '+' : '−'}${format(Math.abs(delta))}`;
}

/** A source's share of the placement's fetches that ended with a flow, in whole percent; null without any. */
function share(p, source) {
  const sources = p?.sources ?? {};
  const total = Object.values(sources).reduce((s, n) => s + (Number.isFinite(n) ? n : 0), 0);
  if (!total || !Number.isFinite(sources[source])) return null;
  return Math.round((sources[source] / total) * 100);
}

/**
 * The two runs' durations as shares per bin on one logarithmic axis (fetches range from a cache
 * hit's milliseconds to a timeout's seconds), A and B overlaid.
 */
function drawHistograms(container, nameA, nameB, a, b) {
  clear(container);
  const all = a.concat(b).sort((x, y) => x - y);
  if (!all.length) return;
  // From the shortest (at least 1 ms) to the 99th percentile of both, so one outlier does not squash the rest.
  const lo = Math.max(0.001, all.find((d) => d > 0) ?? 0.001);
  const hi = Math.max(all[Math.min(all.length - 1, Math.floor(all.length * 0.99))], lo * 10);
  const ratio = Math.log(hi / lo);
  const edge = (i) => lo * Math.exp((ratio * i) / BINS);
  const binOf = (d) => (d <= lo ? 0 : Math.min(BINS - 1, Math.floor((Math.log(d / lo) / ratio) * BINS)));
  // The wrap is not displayed while empty: the panel gives the width.
  const width = Math.max(320, (container.parentElement?.clientWidth ?? 668) - 28), height = 160, left = 44, bottom = 34;
  const shares = (list) => {
    const counts = new Array(BINS).fill(0);
    for (const d of list) counts[binOf(d)] += 1;
    return counts.map((n) => (list.length ? n / list.length : 0));
  };
  const sa = shares(a), sb = shares(b);
  const peak = Math.max(0.01, ...sa, ...sb);
  const root = svg('svg', { class: 'compare-chart', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': `Time to flow: ${nameA} (${a.length} fetches) and ${nameB} (${b.length} fetches), as shares per bin` });
  const plot = width - left - 8, h = height - bottom - 8;
  const x = (i) => left + (i / BINS) * plot;
  const y = (s) => 8 + h - (s / peak) * h;
  const barWidth = Math.max(1, plot / BINS - 2);
  for (let i = 0; i < BINS; i++) {
    const range = `${i === 0 ? 'up' : fmt.duration(edge(i))} to ${fmt.duration(edge(i + 1))}`;
    for (const [share, cls, label] of [[sa[i], 'compare-a', `A ${nameA}`], [sb[i], 'compare-b', `B ${nameB}`]]) {
      if (!(share > 0)) continue;
      root.appendChild(tooltip(svg('rect', { class: cls, x: x(i) + 1, y: y(share), width: barWidth, height: 8 + h - y(share) }),
        `${label}: ${Math.round(share * 100)}% of fetches, ${range}`));
    }
  }
  root.appendChild(svg('line', { class: 'axis-line', x1: left, x2: left + plot, y1: 8 + h, y2: 8 + h }));
  for (const i of [0, BINS / 4, BINS / 2, (3 * BINS) / 4, BINS]) {
    root.appendChild(svg('text', { class: 'axis-label', x: x(i), y: 8 + h + 15, 'text-anchor': i === 0 ? 'start' : i === BINS ? 'end' : 'middle' },
      fmt.axisDuration(Number(edge(i).toPrecision(2)))));
  }
  root.appendChild(svg('text', { class: 'axis-label', x: left - 6, y: 14, 'text-anchor': 'end' }, `${Math.round(peak * 100)}%`));
  root.appendChild(svg('text', { class: 'axis-title', x: left + plot / 2, y: height - 3, 'text-anchor': 'middle' },
    'fetch duration (log scale) · share of each run\'s fetches per bar'));
  container.appendChild(root);
}
