// The filter bar: which calls every panel shows. Values are kept by their URL key; the server applies
// them (GET /api/calls and /api/events take the same parameters), so they work on stored runs too.

/** [control id, URL key, API parameter (null: turned into from/to)]. */
export const FIELDS = [
  ['f-range', 'range', null],
  ['filter-placement', 'placement', 'placement'],
  ['f-call', 'callName', 'call'],
  ['f-source', 'source', 'source'],
  ['f-audience', 'audience', 'audience'],
  ['f-variation', 'variation', 'variation'],
  ['f-targeting', 'targetingLost', 'targetingLost'],
  ['f-error', 'errorCode', 'errorCode'],
  ['f-min', 'minDuration', 'minDuration'],
  ['f-max', 'maxDuration', 'maxDuration'],
  ['f-trace', 'trace', 'trace'],
  ['f-q', 'q', 'q'],
  ['f-from', 'from', 'from'],
  ['f-to', 'to', 'to'],
];

/** The custom range's keys: read only while the Time control says `custom`. */
const CUSTOM = new Set(['from', 'to']);

/** Time ranges of the Time control: relative to now, or the selected run's first to last event. */
export const RANGES = { '5m': { from: '-5m' }, '1h': { from: '-1h' } };

/** The values of the controls, by URL key (empty ones left out). */
export function readControls(doc = document) {
  const values = {};
  for (const [id, key] of FIELDS) {
    const v = doc.getElementById(id)?.value.trim() ?? '';
    if (v) values[key] = v;
  }
  if (values.range !== 'custom') for (const key of CUSTOM) delete values[key];
  return values;
}

/** Sets the controls to `values` (a select gets an option for a value it does not offer yet). */
export function writeControls(values, doc = document) {
  for (const [id, key] of FIELDS) {
    const control = doc.getElementById(id);
    if (!control) continue;
    const v = values[key] ?? '';
    if (control.tagName === 'SELECT' && v && ![...control.options].some((o) => o.value === v)) control.add(new Option(v, v));
    control.value = v;
  }
  const custom = doc.getElementById('f-custom');
  if (custom) custom.hidden = values.range !== 'custom';
}

/** Whether any filter or time range is set. */
export function active(values) {
  return Object.keys(values).length > 0;
}

/** The filters in a URL's hash parameters. */
export function fromParams(q) {
  const values = {};
  for (const [, key] of FIELDS) {
    const v = q.get(key);
    if (v) values[key] = v;
  }
  if (values.range !== 'custom') for (const key of CUSTOM) delete values[key];
  return values;
}

/** Adds the filters to hash parameters. */
export function toParams(values, q) {
  for (const [, key] of FIELDS) if (values[key]) q.set(key, values[key]);
}

/**
 * The API parameters of `values` for `run` ('' for all runs); `summary` is the run's entry of
 * /api/runs (for the run's span: its first to its last event).
 */
export function apiParams(values, run, summary) {
  const params = { run: run || null };
  for (const [, key, param] of FIELDS) if (param && values[key]) params[param] = values[key];
  const range = values.range;
  if (range && RANGES[range]) Object.assign(params, RANGES[range]);
  if (range === 'span' && summary?.firstTs && summary?.lastTs) { params.from = summary.firstTs; params.to = summary.lastTs; }
  return params;
}

/** A short text of the filters set: "source cache · last 5 min". */
export function describe(values) {
  const ranges = { '5m': 'last 5 min', '1h': 'last 1 h', span: "the run's span", custom: 'from … to …' };
  return FIELDS.filter(([, key]) => values[key] && !(key === 'range' && values.range === 'custom' && (values.from || values.to)))
    .map(([, key]) => (key === 'range' ? ranges[values.range] ?? values.range : `${key} ${values[key]}`)).join(' · ');
}
