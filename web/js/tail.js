// The live event tail: newest first, filtered by run, placement and event name, bounded.
import { el } from './svg.js';
import { eventClass } from './waterfall.js';
import * as fmt from './format.js';

/** Rows shown at most. */
export const TAIL_ROWS = 150;

/** Every event name of events-and-metrics.md, for the name filter. */
export const EVENT_NAMES = [
  'fetch.start', 'fetch.end', 'cache.hit', 'cache.miss', 'cache.expired', 'cache.stored', 'cache.corrupt',
  'cache.evicted', 'request.start', 'request.end', 'timeout', 'fallback', 'preload.start', 'preload.end',
  'layout.cache.hit', 'layout.cache.miss', 'layout.stored', 'assets.prefetch.start', 'assets.prefetch.end',
  'asset.bundled', 'attribution.applied', 'attribution.timeout', 'param.clamped', 'profile.changed', 'sink.dropped',
];

/**
 * Whether an envelope passes the filters ({run: string|null, placement, name}). A preload event (no
 * placement of its own) matches the placements it names: `placements`, `succeeded`, `failed`.
 */
export function matches(e, filters) {
  if (filters.run !== null && e.run !== filters.run) return false;
  if (filters.placement && e.placement !== filters.placement && !namesPlacement(e, filters.placement)) return false;
  if (filters.name && e.name !== filters.name) return false;
  return true;
}

function namesPlacement(e, placement) {
  if (e.placement !== null && e.placement !== undefined) return false;
  const a = e.attrs && typeof e.attrs === 'object' ? e.attrs : {};
  return (Array.isArray(a.placements) && a.placements.includes(placement))
    || (Array.isArray(a.succeeded) && a.succeeded.includes(placement))
    || (a.failed !== null && typeof a.failed === 'object' && !Array.isArray(a.failed) && Object.hasOwn(a.failed, placement));
}

/** Replaces a select's options after its fixed first ones, keeping the selection when still offered. */
export function setOptions(select, values, keepFirst = 1) {
  const offered = [...select.options].slice(keepFirst).map((o) => o.value);
  if (offered.length === values.length && offered.every((v, i) => v === values[i])) return;
  const current = select.value;
  while (select.options.length > keepFirst) select.remove(keepFirst);
  for (const v of values) select.add(new Option(v, v));
  if ([...select.options].some((o) => o.value === current)) select.value = current;
}

/**
 * Renders the newest matching events of `events` (oldest first) into the tail table. Rows of a call
 * open it (`onSelect(trace)`); they share one tab stop (`current` seq, else the first row), arrow keys
 * move between them and `onCurrent(seq)` hears where the focus went. Rows are kept by seq: a redraw
 * adds the new rows on top and removes the ones that fell off, the others stay as they are.
 */
export function renderTail(section, events, filters, { onSelect, onCurrent, current } = {}) {
  const tbody = section.querySelector('tbody');
  const empty = section.querySelector('.panel-empty');
  const wanted = [];
  for (let i = events.length - 1; i >= 0 && wanted.length < TAIL_ROWS; i -= 1) {
    if (matches(events[i], filters)) wanted.push(events[i]);
  }
  const existing = new Map();
  for (const tr of [...tbody.children]) existing.set(Number(tr.dataset.seq), tr);
  const keep = new Set(wanted.map((e) => e.seq));
  for (const [seq, tr] of existing) if (!keep.has(seq)) tr.remove();
  let cursor = tbody.firstElementChild;
  for (const e of wanted) {
    const tr = existing.get(e.seq);
    if (tr && tr === cursor) { cursor = cursor.nextElementSibling; continue; }
    tbody.insertBefore(tr ?? tailRow(e, tbody, { onSelect, onCurrent }), cursor);
  }
  const stop = tbody.querySelector(`tr[tabindex][data-seq="${Number(current)}"]`) ?? tbody.querySelector('tr[tabindex]');
  for (const tr of tbody.querySelectorAll('tr[tabindex="0"]')) if (tr !== stop) tr.tabIndex = -1;
  if (stop && stop.tabIndex !== 0) stop.tabIndex = 0;
  const none = wanted.length === 0;
  if (empty.hidden !== !none) empty.hidden = !none;
  return wanted.length;
}

/** One row of the tail. */
function tailRow(e, tbody, { onSelect, onCurrent }) {
  const tr = el('tr', `ev ${eventClass(e.name)}`, null, { 'data-seq': e.seq, 'data-name': e.name });
  tr.appendChild(el('td', 'num mono muted', String(e.seq)));
  const time = el('td', 'mono');
  time.appendChild(el('time', null, fmt.clock(e.ts), { datetime: e.ts, title: `${e.ts} · t=${e.t}` }));
  tr.appendChild(time);
  tr.appendChild(el('td', 'mono run-cell', e.run ?? '', { title: e.run ?? '' }));
  tr.appendChild(el('td', 'mono', e.placement ?? '', { title: e.placement ?? '' }));
  tr.appendChild(el('td', 'mono ev-name', e.name, { title: e.name }));
  const attrs = fmt.attrs(e.attrs);
  tr.appendChild(el('td', 'mono attrs', attrs, { title: attrs }));
  if (onSelect && e.trace) {
    tr.tabIndex = -1;
    tr.addEventListener('click', () => onSelect(e.trace, e.run));
    tr.addEventListener('focus', () => {
      for (const other of tbody.querySelectorAll('tr[tabindex="0"]')) if (other !== tr) other.tabIndex = -1;
      tr.tabIndex = 0;
      onCurrent?.(e.seq);
    });
    tr.addEventListener('keydown', (event) => {
      if (event.key === 'Enter') { onSelect(e.trace, e.run); return; }
      const rows = [...tbody.querySelectorAll('tr[tabindex]')];
      const i = rows.indexOf(tr);
      const to = { ArrowDown: i + 1, ArrowUp: i - 1, Home: 0, End: rows.length - 1 }[event.key];
      if (to === undefined) return;
      event.preventDefault();
      rows[Math.max(0, Math.min(rows.length - 1, to))].focus();
    });
  }
  return tr;
}
