// The per-placement table: fetches, share by source (stacked SVG bar), p50/p95, timeouts,
// targeting lost, errors, last preload error.
import { svg, tooltip, el, clear } from './svg.js';
import * as fmt from './format.js';

/** Sources in display order, with their labels; others are shown as "other". */
export const SOURCES = [
  ['network', 'Network'],
  ['cache', 'Cache'],
  ['defaultAudience', 'Default audience'],
  ['fallbackFile', 'Fallback file'],
];
const KNOWN = new Set(SOURCES.map(([k]) => k));

/** The CSS class for a source's colour. */
export function sourceClass(source) {
  if (source === 'error') return 'src-error';
  return KNOWN.has(source) ? `src-${source}` : 'src-other';
}

/** Fills a legend list with one swatch per source. */
export function renderSourceLegend(list, { withError = false } = {}) {
  clear(list);
  const items = SOURCES.concat([['other', 'Other']]);
  if (withError) items.push(['error', 'Error']);
  for (const [key, label] of items) {
    const li = el('li');
    li.appendChild(el('span', `swatch ${sourceClass(key)}`, null, { 'aria-hidden': 'true' }));
    li.appendChild(el('span', null, label));
    list.appendChild(li);
  }
}

/** The stacked bar of one placement's sources, as an SVG of fixed height filling its cell. */
export function sourceBar(sources, total) {
  const width = 100;
  const bar = svg('svg', {
    class: 'chart source-bar', viewBox: `0 0 ${width} 10`, preserveAspectRatio: 'none', role: 'img',
  });
  const entries = Object.entries(sources || {}).filter(([, n]) => Number.isFinite(n) && n > 0);
  const order = (k) => { const i = SOURCES.findIndex(([s]) => s === k); return i < 0 ? 99 : i; };
  entries.sort((a, b) => order(a[0]) - order(b[0]) || a[0].localeCompare(b[0]));
  const sum = entries.reduce((s, [, n]) => s + n, 0);
  const parts = [];
  if (!sum) {
    bar.appendChild(svg('rect', { x: 0, y: 0, width, height: 10, class: 'bar-empty' }));
    bar.setAttribute('aria-label', 'No successful fetches');
    return bar;
  }
  let x = 0;
  for (const [source, n] of entries) {
    const w = (n / sum) * width;
    const label = `${source}: ${fmt.count(n)} (${fmt.percent(n, sum)})`;
    parts.push(label);
    const rect = svg('rect', { x: x.toFixed(3), y: 0, width: Math.max(w, 0.0001).toFixed(3), height: 10, class: `seg ${sourceClass(source)}`, 'data-source': source });
    tooltip(rect, label);
    bar.appendChild(rect);
    x += w;
  }
  bar.setAttribute('aria-label', `Share by source: ${parts.join(', ')}`);
  return bar;
}

/**
 * Renders `placements` (as /api/placements answers) into the table body, busiest first. The count
 * column is the calls of each placement (its fetches, open or ended, and the preloads that name it),
 * with a filter or without one. With `calls` (a filtered answer), the empty table says no call matched.
 */
export function renderPlacements(section, placements, { calls = false } = {}) {
  const tbody = section.querySelector('tbody');
  const empty = section.querySelector('.panel-empty');
  const table = section.querySelector('table');
  clear(tbody);
  const count = (p) => p.calls ?? 0;
  empty.textContent = calls ? 'No call matches these filters.' : 'No calls in this run yet.';
  const list = Array.isArray(placements) ? placements.slice() : [];
  list.sort((a, b) => count(b) - count(a) || String(a.placement).localeCompare(String(b.placement)));
  empty.hidden = list.length > 0;
  table.hidden = list.length === 0;
  for (const p of list) {
    const tr = el('tr', null, null, { 'data-placement': p.placement });
    const name = el('th', 'placement-name', null, { scope: 'row' });
    name.appendChild(el('span', 'mono clip', p.placement, { title: p.placement }));
    tr.appendChild(name);
    tr.appendChild(el('td', 'num count', fmt.count(count(p))));
    const barCell = el('td', 'bar-col');
    const wrap = el('div', 'bar-cell');
    wrap.appendChild(sourceBar(p.sources, p.fetches));
    const top = topSource(p.sources);
    const topText = top ? `${top[0]} ${fmt.percent(top[1], sumOf(p.sources))}` : '–';
    wrap.appendChild(el('span', 'bar-note', topText, { title: topText }));
    barCell.appendChild(wrap);
    tr.appendChild(barCell);
    const d = p.duration || {};
    tr.appendChild(durationCell(d.p50, d.samples));
    tr.appendChild(durationCell(d.p95, d.samples));
    tr.appendChild(countCell(p.timeouts, 'warn'));
    const lost = countCell(p.targetingLost, 'warn');
    if (p.targetingLost > 0 && p.fetches > 0) {
      lost.appendChild(el('span', 'cell-sub inline', fmt.percent(p.targetingLost, p.fetches)));
    }
    tr.appendChild(lost);
    tr.appendChild(countCell(p.errors, 'bad'));
    const errCell = el('td', 'preload-error');
    const e = p.lastPreloadError;
    if (e && e.code !== undefined) {
      errCell.appendChild(el('span', 'pill bad', fmt.errorCode(e.code)));
      const when = el('time', 'cell-sub', fmt.ago(e.ts), { datetime: e.ts, title: `${e.ts} (seq ${e.seq})` });
      errCell.appendChild(when);
    } else {
      errCell.appendChild(el('span', 'muted', 'none'));
    }
    tr.appendChild(errCell);
    tbody.appendChild(tr);
  }
}

function durationCell(seconds, samples) {
  const td = el('td', 'num', fmt.duration(seconds));
  if (samples) td.title = `${fmt.count(samples)} samples`;
  if (Number.isFinite(seconds) && seconds >= 4) td.classList.add('warn');
  return td;
}

function countCell(n, tone) {
  const td = el('td', 'num');
  td.appendChild(el('span', n > 0 ? tone : 'muted', fmt.count(n ?? 0)));
  return td;
}

function sumOf(sources) {
  return Object.values(sources || {}).reduce((s, n) => s + (Number.isFinite(n) ? n : 0), 0);
}

function topSource(sources) {
  let best = null;
  for (const [k, n] of Object.entries(sources || {})) if (Number.isFinite(n) && n > 0 && (!best || n > best[1])) best = [k, n];
  return best;
}
