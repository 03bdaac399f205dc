// The view in the URL's hash: run, open call, the filters and time range, the tail's filters and the
// waterfall's zoom and the run compared with (`#run=live&call=<trace>&placement=&source=&range=5m&zoom=0.1-0.35&event=&tailRun=&compare=`).
import * as filters from './filters.js';

/** The URL keys of the compare panel's time ranges, A's and B's from and to (js/compare.js). */
export const COMPARE_RANGE = ['aFrom', 'aTo', 'bFrom', 'bTo'];

/** The view a hash describes: {run, call, filters, zoom, event, tailRun, compare, compareRanges} (null: not given). */
export function viewFromHash(hash) {
  const q = new URLSearchParams(hash.replace(/^#/, ''));
  return {
    run: q.get('run'), call: q.get('call'), filters: filters.fromParams(q), zoom: parseZoom(q.get('zoom')),
    event: q.get('event') ?? '', tailRun: q.get('tailRun'), compare: q.get('compare') ?? '',
    compareRanges: Object.fromEntries(COMPARE_RANGE.map((key) => [key, q.get(key) ?? ''])),
  };
}

/** `zoom=<from>-<to>` (seconds from the calls' starts) as [from, to]; null when absent or not a span. */
export function parseZoom(text) {
  const m = /^(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)$/.exec(text ?? '');
  if (!m) return null;
  const zoom = [Number(m[1]), Number(m[2])];
  return zoom[1] > zoom[0] ? zoom : null;
}

function formatZoom(zoom) {
  return zoom.map((v) => String(Number(v.toFixed(9)))).join('-');
}

/** The hash of a view ({run, call, filters, zoom, event, tailRun, compare, compareRanges}; tailRun '@view': the selected run's). */
export function viewHash({ run, call, filters: values, zoom, event, tailRun, compare, compareRanges = {} }) {
  const q = new URLSearchParams();
  q.set('run', run);
  if (call) q.set('call', call);
  filters.toParams(values, q);
  if (zoom) q.set('zoom', formatZoom(zoom));
  if (event) q.set('event', event);
  if (tailRun !== '@view') q.set('tailRun', tailRun);
  if (compare) {
    q.set('compare', compare);
    for (const key of COMPARE_RANGE) if (compareRanges[key]) q.set(key, compareRanges[key]);
  }
  return `#${q.toString()}`;
}
