// The KPI row: the read model's totals of the run's calls, or with a filter the stats of the matching
// calls (docs/events-and-metrics.md, "Numbers").
import * as fmt from './format.js';
import { setText } from './svg.js';

/** The KPIs of the matching calls, from the server's stats. */
export function renderQueryKpis(query, events, page) {
  if (query?.failure) {
    // No answer is not zero calls: the KPIs say nothing, the panels say why.
    for (const key of ['fetches', 'network', 'p50', 'p95', 'timeouts', 'targetingLost', 'errors', 'rate']) setKpi(key, '–', `HTTP ${query.failure.status || 'no answer'}`);
    return;
  }
  const answer = query?.answer;
  const stats = answer?.stats ?? {};
  const matched = answer?.counts?.matched ?? null;
  const sources = stats.sources ?? {};
  const ok = Object.values(sources).reduce((a, b) => a + (Number.isFinite(b) ? b : 0), 0);
  const network = sources.network ?? 0;
  // The read model's numbers (docs/events-and-metrics.md, "Numbers"): the same as without a filter.
  const fetches = Number.isFinite(stats.fetches) ? stats.fetches : 0;
  const samples = Number.isFinite(stats.samples) ? stats.samples : 0;
  setKpi('fetches', fmt.count(fetches), matched !== null ? `of ${fmt.count(matched)} matching calls` : 'matching calls');
  setKpi('network', fmt.percent(network, ok), ok ? `${fmt.count(network)} of ${fmt.count(ok)} served` : '');
  setKpi('p50', fmt.duration(stats.p50), samples ? `${fmt.count(samples)} matching fetches` : '');
  setKpi('p95', fmt.duration(stats.p95), samples ? `${fmt.count(samples)} matching fetches` : '', stats.p95 >= 4 ? 'warn' : '');
  setKpi('timeouts', fmt.count(stats.timeouts), fetches ? `${(stats.timeouts / fetches).toFixed(2)} per fetch` : '', stats.timeouts ? 'warn' : '');
  setKpi('targetingLost', fmt.count(stats.targetingLost), fetches ? `${fmt.percent(stats.targetingLost, fetches)} of fetches` : '', stats.targetingLost ? 'warn' : '');
  setKpi('errors', fmt.count(stats.errors), 'fetch + preload', stats.errors ? 'bad' : '');
  const minuteAgo = Date.now() - 60000;
  const recent = events.filter((e) => new Date(e.ts).getTime() >= minuteAgo).length;
  // The page holds the newest PAGE events of the matching calls: when all are from the last minute, at least that many.
  setKpi('rate', `${events.length >= page && recent === events.length ? '≥ ' : ''}${fmt.count(recent)}`, 'of the matching calls');
}

/**
 * Without a filter: the read model's `totals` of the run's calls, the count of `placements`, and the
 * events of the last minute among `events` (`capped`: the page may hold less than that minute).
 */
export function renderRunKpis({ totals, placements, runDetail, run, runs, events, capped }) {
  // The read model's totals over the run's calls (GET /api/placements): the same numbers a filter
  // that excludes nothing gives (docs/events-and-metrics.md, "Numbers").
  const t = totals ?? {};
  const n = (v) => (Number.isFinite(v) ? v : 0);
  const fetches = n(t.fetches);
  const sources = t.sources ?? {};
  const ok = Object.values(sources).reduce((a, b) => a + n(b), 0);
  const network = n(sources.network);
  const samples = n(t.samples);
  const ps = placements;
  setKpi('fetches', fmt.count(fetches), `${fmt.count(ps.length)} placement${ps.length === 1 ? '' : 's'}`);
  setKpi('network', fmt.percent(network, ok), ok ? `${fmt.count(network)} of ${fmt.count(ok)} served` : '');
  setKpi('p50', fmt.duration(t.p50), samples ? `${fmt.count(samples)} fetches` : '');
  setKpi('p95', fmt.duration(t.p95), samples ? `${fmt.count(samples)} fetches` : '', t.p95 >= 4 ? 'warn' : '');
  setKpi('timeouts', fmt.count(n(t.timeouts)), fetches ? `${(n(t.timeouts) / fetches).toFixed(2)} per fetch` : '', t.timeouts ? 'warn' : '');
  setKpi('targetingLost', fmt.count(n(t.targetingLost)), fetches ? `${fmt.percent(n(t.targetingLost), fetches)} of fetches` : '', t.targetingLost ? 'warn' : '');
  setKpi('errors', fmt.count(n(t.errors)), 'fetch + preload', t.errors ? 'bad' : '');
  const summary = runDetail?.run ?? null;
  // Events of the last minute; when the page holds less than that minute (a capped page or a full
  // buffer), the rate over the stretch it holds.
  const now = Date.now();
  let recent = 0;
  let oldest = null;
  let coversMinute = false;
  for (let i = events.length - 1; i >= 0; i -= 1) {
    const ts = new Date(events[i].ts).getTime();
    if (ts < now - 60000) { coversMinute = true; break; }
    recent += 1;
    oldest = ts;
  }
  const partial = !coversMinute && oldest !== null && capped;
  if (partial) recent = Math.round((recent * 60000) / Math.max(now - oldest, 1000));
  const total = summary?.events ?? (run === '' ? runs.reduce((s, r) => s + (r.events ?? 0), 0) : null);
  setKpi('rate', fmt.count(recent), total !== null ? `${fmt.count(total)} events total` : '');
}

export function setKpi(key, value, sub, tone = '') {
  const node = document.querySelector(`.kpi[data-kpi="${key}"]`);
  setText(node.querySelector('.kpi-value'), value);
  setText(node.querySelector('.kpi-sub'), sub);
  if (node.dataset.tone !== tone) node.dataset.tone = tone;
}
