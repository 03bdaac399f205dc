// The run picker: its options grouped by kind, each run's kind, and the badge that names it.
import * as fmt from './format.js';
import { el, clear, setText } from './svg.js';

const KIND_LABELS = { live: 'Live', test: 'Test runs', simulation: 'Simulations' };

/**
 * Fills `select` with All runs and `runs` grouped as Live, Test runs and Simulations (`live` always
 * listed), each with its event count and whether it is stored, and selects `current` (listed even
 * when `runs` does not hold it: a run opened by its URL).
 */
export function fillRunSelect(select, runs, current) {
  clear(select);
  select.appendChild(new Option('All runs', ''));
  const groups = { live: [], test: [], simulation: [] };
  for (const r of runs) (groups[r.kind] ?? groups.test).push(r);
  if (!groups.live.some((r) => r.id === 'live')) groups.live.unshift({ id: 'live', kind: 'live', events: 0 });
  for (const kind of ['live', 'test', 'simulation']) {
    if (!groups[kind].length) continue;
    const group = el('optgroup', null, null, { label: KIND_LABELS[kind] });
    for (const r of groups[kind]) {
      const label = `${r.id}${Number.isFinite(r.events) && r.events ? `  (${fmt.compact(r.events)} events)` : ''}${r.stored ? ' · stored' : ''}`;
      group.appendChild(new Option(label, r.id));
    }
    select.appendChild(group);
  }
  if (current && ![...select.options].some((o) => o.value === current)) select.appendChild(new Option(current, current));
  select.value = current;
}

/** The kind of run `id`: 'all' for '', else as `runs` lists it, else guessed from its id. */
export function runKind(id, runs) {
  if (id === '') return 'all';
  const known = runs.find((r) => r.id === id);
  if (known) return known.kind;
  if (id === 'live' || id.startsWith('live:')) return 'live';
  if (id.startsWith('sim:') || id.startsWith('simulation:')) return 'simulation';
  return 'test';
}

/** The badge next to the picker for a run of `kind` ('missing': a run the server does not have). */
export function renderBadge(badge, kind) {
  if (badge.dataset.kind !== kind) badge.dataset.kind = kind;
  setText(badge, { all: 'all runs', missing: 'no such run' }[kind] ?? kind);
}
