// Number, duration and time formatting for the dashboard. Pure functions, no DOM.

/** Seconds as "0 ms", "12.3 ms", "512 ms", "1.24 s", "12.5 s", "2m 05s". Null or NaN gives "–". */
export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '–';
  const s = Math.max(0, seconds);
  if (s === 0) return '0 ms';
  if (s < 0.001) return `${(s * 1000).toFixed(2)} ms`;
  if (s < 0.01) return `${(s * 1000).toFixed(1)} ms`;
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 10) return `${s.toFixed(2)} s`;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  const rest = Math.round(s - m * 60);
  return `${m}m ${String(rest).padStart(2, '0')}s`;
}

/** A short axis label for seconds: "0", "250ms", "1s", "1.5s". */
export function axisDuration(seconds) {
  if (seconds === 0) return '0';
  if (seconds < 1) return `${Math.round(seconds * 1000)}ms`;
  return `${Number(seconds.toFixed(2))}s`;
}

const integer = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });

/** An integer with grouping ("12,345"); null gives "–". */
export function count(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return '–';
  return integer.format(n);
}

/** A compact count ("950", "12.3k", "4.1M"). */
export function compact(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return '–';
  if (Math.abs(n) < 1000) return String(Math.round(n));
  if (Math.abs(n) < 1e6) return `${(n / 1000).toFixed(n < 1e4 ? 1 : 0)}k`;
  return `${(n / 1e6).toFixed(1)}M`;
}

/** A share as a percentage ("25%", "0.4%"); a zero total gives "–". */
export function percent(part, total) {
  if (!total) return '–';
  const p = (100 * part) / total;
  if (p > 0 && p < 1) return `${p.toFixed(1)}%`;
  return `${Math.round(p)}%`;
}

/** Wall-clock time of an ISO timestamp as "10:11:12.345" (local time). */
export function clock(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso ?? '');
  const p = (n, w = 2) => String(n).padStart(w, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

/** How long ago an ISO timestamp was, relative to `now` (ms): "just now", "42s ago", "5m ago", "3h ago", "2d ago". */
export function ago(iso, now = Date.now()) {
  const t = new Date(iso).getTime();
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, (now - t) / 1000);
  if (s < 5) return 'just now';
  if (s < 60) return `${Math.floor(s)}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

/** Names of the engine's error codes (fetch-semantics.md). */
export const errorNames = {
  2002: 'notActivated',
  2003: 'badRequest',
  2004: 'serverError',
  2005: 'networkFailed',
  2006: 'decodingFailed',
  3001: 'wrongParam',
  3006: 'profileWasChanged',
  9000: 'operationInterrupted',
};

/** "2005 networkFailed" for a known code, else the code itself. */
export function errorCode(code) {
  const name = errorNames[code];
  return name ? `${code} ${name}` : String(code);
}

/** One attribute value as short text: strings as is, arrays joined, objects as compact JSON. */
export function attrValue(v) {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'string') return v;
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : String(Number(v.toFixed(4)));
  if (Array.isArray(v)) return `[${v.map(attrValue).join(', ')}]`;
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

/** Attributes as "key=value key=value" in key order. */
export function attrs(a) {
  if (!a || typeof a !== 'object') return '';
  return Object.keys(a).sort().map((k) => `${k}=${attrValue(a[k])}`).join('  ');
}
