// FlowScope dashboard: loads the selected run's aggregates and recent events, then follows the
// live stream. No dependencies, no build step; all data goes into the DOM through textContent.
import * as api from './js/api.js';
import * as fmt from './js/format.js';
import { EventBuffer, groupCalls, fetchDurations } from './js/store.js';
import { renderPlacements, renderSourceLegend } from './js/placements.js';
import { renderWaterfall, renderWaterfallLegend, renderTraceDetail } from './js/waterfall.js';
import { renderHistogram, percentile } from './js/histogram.js';
import { renderTail, setOptions, EVENT_NAMES } from './js/tail.js';
import { el, clear } from './js/svg.js';
import { renderStrategies, hasStrategies } from './js/strategies.js';

const $ = (selector) => document.querySelector(selector);

const state = {
  run: 'live', // '' means all runs
  runs: [],
  runDetail: null,
  placements: [],
  buffer: new EventBuffer(),
  selectedTrace: null,
  paused: false,
  conn: 'connecting',
  loaded: false,
  error: null,
};

const WATERFALL_CALLS = 24;
const KIND_LABELS = { live: 'Live', test: 'Test runs', simulation: 'Simulations' };

// ---------------------------------------------------------------- run selector

function runFromHash() {
  const m = /(?:^#|&)run=([^&]*)/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

function renderRunSelect() {
  const select = $('#run-select');
  clear(select);
  select.appendChild(new Option('All runs', ''));
  const groups = { live: [], test: [], simulation: [] };
  for (const r of state.runs) (groups[r.kind] ?? groups.test).push(r);
  if (!groups.live.some((r) => r.id === 'live')) groups.live.unshift({ id: 'live', kind: 'live', events: 0 });
  for (const kind of ['live', 'test', 'simulation']) {
    if (!groups[kind].length) continue;
    const group = el('optgroup', null, null, { label: KIND_LABELS[kind] });
    for (const r of groups[kind]) {
      const label = `${r.id}${Number.isFinite(r.events) && r.events ? `  (${fmt.compact(r.events)} events)` : ''}`;
      const option = new Option(label, r.id);
      group.appendChild(option);
    }
    select.appendChild(group);
  }
  if (state.run && ![...select.options].some((o) => o.value === state.run)) {
    select.appendChild(new Option(state.run, state.run));
  }
  select.value = state.run;
  const kind = runKind(state.run);
  const badge = $('#run-kind');
  badge.dataset.kind = kind;
  badge.textContent = kind === 'all' ? 'all runs' : kind;

  const tailRun = $('#filter-run');
  setOptions(tailRun, state.runs.map((r) => r.id), 2);
}

function runKind(id) {
  if (id === '') return 'all';
  const known = state.runs.find((r) => r.id === id);
  if (known) return known.kind;
  if (id === 'live' || id.startsWith('live:')) return 'live';
  if (id.startsWith('sim:') || id.startsWith('simulation:')) return 'simulation';
  return 'test';
}

async function selectRun(run) {
  state.run = run;
  state.selectedTrace = null;
  const hash = `#run=${encodeURIComponent(run)}`;
  if (location.hash !== hash) history.replaceState(null, '', hash);
  renderRunSelect();
  state.buffer.clear();
  await Promise.all([loadEvents(), loadAggregates(), loadSinks()]);
  render();
}

// ---------------------------------------------------------------- loading

async function loadRuns() {
  try {
    const answer = await api.runs();
    state.runs = Array.isArray(answer.runs) ? answer.runs : [];
    renderRunSelect();
  } catch (error) {
    note(error);
  }
}

/** Shows every sink that is down (its last write or export failed), with its last error. */
async function loadSinks() {
  const alert = $('#sink-alert');
  try {
    const answer = await api.sinks();
    const down = (Array.isArray(answer.sinks) ? answer.sinks : []).filter((s) => s.up === false);
    alert.hidden = down.length === 0;
    alert.replaceChildren(...down.map((s) => {
      const line = document.createElement('p');
      line.dataset.sink = s.name;
      line.textContent = `Sink ${s.name} (${s.type}) is down: ${s.lastError ?? 'its last write failed'}` +
        ` (${s.errors} errors, ${s.dropped} events lost). Events still reach the other sinks.`;
      return line;
    }));
  } catch (error) {
    // /api/sinks unreachable: the connection state already says so.
  }
}

async function loadAggregates() {
  const run = state.run === '' ? null : state.run;
  try {
    const [placements, detail] = await Promise.all([
      api.placements(run),
      run ? api.run(run).catch(() => null) : Promise.resolve(null),
    ]);
    if ((placements.run ?? null) !== run && placements.run !== undefined) return; // a newer selection won
    state.placements = Array.isArray(placements.placements) ? placements.placements : [];
    state.runDetail = detail;
    state.error = null;
  } catch (error) {
    note(error);
  }
}

async function loadEvents() {
  try {
    const answer = await api.events({ limit: 1000, run: state.run || null });
    const list = Array.isArray(answer.events) ? answer.events : [];
    state.buffer.add(list);
    // The server caps a page (1000 events): then the page does not hold the whole last minute.
    state.pageLimited = list.length >= 1000;
    setLatestSeq(answer.latestSeq);
    state.loaded = true;
  } catch (error) {
    note(error);
  }
}

/** After the stream (re)opens: fetch what may have been missed between the page load and the stream. */
async function fillGap() {
  try {
    // A few pages at most: the buffer keeps 5000 events anyway.
    for (let page = 0; page < 5; page += 1) {
      const since = state.buffer.latestSeq;
      if (since === null) return;
      const answer = await api.events({ since, limit: 1000, run: state.run || null });
      const list = Array.isArray(answer.events) ? answer.events : [];
      if (state.buffer.add(list).length) scheduleRender();
      setLatestSeq(answer.latestSeq);
      if (list.length < 1000) return;
    }
  } catch (error) {
    note(error);
  }
}

let latestSeq = null;
function setLatestSeq(seq) {
  if (Number.isFinite(seq) && (latestSeq === null || seq > latestSeq)) latestSeq = seq;
  $('#footer-seq').textContent = `latest seq ${latestSeq === null ? '–' : fmt.count(latestSeq)} · ${fmt.count(state.buffer.events.length)} events in page (max ${fmt.count(state.buffer.capacity)})`;
}

function note(error) {
  state.error = error;
  console.warn('FlowScope:', error);
}

// ---------------------------------------------------------------- live stream

function setConn(conn) {
  state.conn = conn;
  const node = $('#conn-state');
  node.dataset.state = conn;
  const texts = { open: 'Live', connecting: 'Connecting…', reconnecting: 'Reconnecting…', closed: 'Offline — retrying', off: 'Snapshot' };
  node.querySelector('.conn-text').textContent = texts[conn] ?? conn;
  node.title = conn === 'open' ? 'Connected to /api/events/stream'
    : conn === 'off' ? 'Live updates are off (?stream=off); reload without it to follow events'
      : 'The event stream is not connected; it reconnects by itself';
}

const stream = new api.LiveStream({
  onState: (s) => setConn(s === 'connecting' && state.everOpen ? 'reconnecting' : s),
  onOpen: () => { state.everOpen = true; fillGap(); },
  onEvents: (batch) => {
    const fresh = state.buffer.add(batch);
    if (!fresh.length) return;
    setLatestSeq(fresh[fresh.length - 1].seq);
    const newRun = fresh.some((e) => !state.runs.some((r) => r.id === e.run));
    scheduleAggregates(newRun);
    scheduleRender();
  },
});

let aggregateTimer = null;
function scheduleAggregates(includeRuns) {
  if (includeRuns) state.runsStale = true;
  if (aggregateTimer) return;
  aggregateTimer = setTimeout(async () => {
    aggregateTimer = null;
    const jobs = [loadAggregates()];
    if (state.runsStale || Date.now() - (state.runsAt ?? 0) > 5000) {
      state.runsStale = false;
      state.runsAt = Date.now();
      jobs.push(loadRuns());
    }
    await Promise.all(jobs);
    scheduleRender();
  }, 1000);
}

// ---------------------------------------------------------------- rendering

let renderQueued = false;
let lastRender = 0;
function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  const wait = Math.max(0, 250 - (performance.now() - lastRender));
  setTimeout(() => requestAnimationFrame(() => { renderQueued = false; lastRender = performance.now(); render(); }), wait);
}

function viewEvents() {
  return state.buffer.ofRun(state.run === '' ? null : state.run);
}

function render() {
  const events = viewEvents();
  const nothing = state.loaded && state.buffer.events.length === 0 && state.placements.length === 0
    && !hasStrategies(state.runDetail) && !state.runs.some((r) => r.events > 0 || r.kind === 'simulation');
  $('#empty-state').hidden = !nothing;
  document.body.classList.toggle('is-empty', nothing);

  const simulation = hasStrategies(state.runDetail);
  renderStrategies($('#strategies'), state.runDetail);
  renderPlacements($('#placements'), state.placements);
  // A saved simulation has no events: its strategies are the whole story.
  for (const id of ['#summary', '#placements', '#waterfall', '.split']) $(id).hidden = simulation && events.length === 0;
  renderKpis(events);

  const nowT = events.length ? events[events.length - 1].t : null;
  const calls = groupCalls(events, WATERFALL_CALLS, nowT);
  const wf = $('#waterfall');
  renderWaterfall($('#waterfall-chart'), calls, { onSelect: selectTrace, selected: state.selectedTrace });
  wf.querySelector(':scope > .panel-empty').hidden = calls.length > 0;
  renderDetail(events);

  const samples = fetchDurations(events);
  const h = renderHistogram($('#histogram-chart'), samples);
  $('#histogram .panel-empty').hidden = samples.length > 0;
  $('#histogram-note').textContent = samples.length ? `${fmt.count(h.count)} calls in page · p50 ${fmt.duration(h.p50)} · p95 ${fmt.duration(h.p95)}` : '';

  updateFilterOptions();
  // While the user reads older rows (scrolled down), the tail holds still; back at the top it follows again.
  const held = $('.tail-wrap').scrollTop > 4;
  if (!state.paused && !held) renderTailNow();
  $('#tail-held').hidden = !held || state.paused;
  setLatestSeq(latestSeq);
}

function renderDetail(events) {
  const panel = $('#trace-detail');
  if (!state.selectedTrace) { renderTraceDetail(panel, null); return; }
  const call = groupCalls(events.filter((e) => e.trace === state.selectedTrace), 1)[0]
    ?? groupCalls(state.buffer.events.filter((e) => e.trace === state.selectedTrace), 1)[0];
  renderTraceDetail(panel, call ?? null);
}

function selectTrace(trace) {
  state.selectedTrace = state.selectedTrace === trace ? null : trace;
  render();
  if (state.selectedTrace) $('#trace-detail').scrollIntoView({ block: 'nearest', behavior: 'smooth' });
}

function renderKpis(events) {
  const ps = state.placements;
  const sum = (f) => ps.reduce((s, p) => s + (Number.isFinite(f(p)) ? f(p) : 0), 0);
  const fetches = sum((p) => p.fetches);
  const network = sum((p) => p.sources?.network);
  const ok = sum((p) => Object.values(p.sources ?? {}).reduce((a, b) => a + b, 0));
  const durations = fetchDurations(events).map((s) => s.duration).sort((a, b) => a - b);
  const summary = state.runDetail?.run ?? null;
  const errors = summary && Number.isFinite(summary.errors) ? summary.errors : sum((p) => p.errors);
  const timeouts = sum((p) => p.timeouts);
  const lost = sum((p) => p.targetingLost);
  setKpi('fetches', fmt.count(fetches), `${fmt.count(ps.length)} placement${ps.length === 1 ? '' : 's'}`);
  setKpi('network', fmt.percent(network, ok), ok ? `${fmt.count(network)} of ${fmt.count(ok)} served` : '');
  setKpi('p50', fmt.duration(percentile(durations, 50)), durations.length ? `last ${fmt.count(durations.length)} calls` : '');
  setKpi('p95', fmt.duration(percentile(durations, 95)), durations.length ? `last ${fmt.count(durations.length)} calls` : '', percentile(durations, 95) >= 4 ? 'warn' : '');
  setKpi('timeouts', fmt.count(timeouts), fetches ? `${(timeouts / fetches).toFixed(2)} per fetch` : '', timeouts ? 'warn' : '');
  setKpi('targetingLost', fmt.count(lost), fetches ? `${fmt.percent(lost, fetches)} of fetches` : '', lost ? 'warn' : '');
  setKpi('errors', fmt.count(errors), summary ? 'fetch + preload' : '', errors ? 'bad' : '');
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
  const partial = !coversMinute && oldest !== null && (state.pageLimited || state.buffer.events.length >= state.buffer.capacity);
  if (partial) recent = Math.round((recent * 60000) / Math.max(now - oldest, 1000));
  const total = summary?.events ?? (state.run === '' ? state.runs.reduce((s, r) => s + (r.events ?? 0), 0) : null);
  setKpi('rate', fmt.count(recent), total !== null ? `${fmt.count(total)} events total` : '');
}

function setKpi(key, value, sub, tone = '') {
  const node = document.querySelector(`.kpi[data-kpi="${key}"]`);
  node.querySelector('.kpi-value').textContent = value;
  node.querySelector('.kpi-sub').textContent = sub;
  node.dataset.tone = tone;
}

function tailFilters() {
  const runChoice = $('#filter-run').value;
  return {
    run: runChoice === '@view' ? (state.run === '' ? null : state.run) : (runChoice === '' ? null : runChoice),
    placement: $('#filter-placement').value,
    name: $('#filter-name').value,
  };
}

function renderTailNow() {
  renderTail($('#tail'), state.buffer.events, tailFilters(), { onSelect: (trace) => selectTrace(trace) });
}

function updateFilterOptions() {
  const placements = new Set(state.placements.map((p) => p.placement));
  for (const e of state.buffer.events) if (e.placement) placements.add(e.placement);
  const sorted = [...placements].sort();
  const select = $('#filter-placement');
  if (select.options.length - 1 !== sorted.length) setOptions(select, sorted);
}

// ---------------------------------------------------------------- start

function wire() {
  renderSourceLegend($('#source-legend'));
  renderWaterfallLegend($('#waterfall-legend'));
  setOptions($('#filter-name'), EVENT_NAMES);
  $('#run-select').addEventListener('change', (event) => selectRun(event.target.value));
  $('#filter-placement').addEventListener('change', renderTailNow);
  $('#filter-name').addEventListener('change', renderTailNow);
  $('#filter-run').addEventListener('change', async () => {
    const choice = $('#filter-run').value;
    if (choice !== '@view') {
      try {
        const answer = await api.events({ limit: 1000, run: choice || null });
        state.buffer.add(answer.events ?? []);
      } catch (error) { note(error); }
    }
    renderTailNow();
  });
  $('#tail-pause').addEventListener('click', () => {
    state.paused = !state.paused;
    const button = $('#tail-pause');
    button.setAttribute('aria-pressed', String(state.paused));
    button.textContent = state.paused ? 'Resume' : 'Pause';
    if (!state.paused) renderTailNow();
  });
  $('.tail-wrap').addEventListener('scroll', () => {
    if ($('.tail-wrap').scrollTop <= 4 && !$('#tail-held').hidden) { $('#tail-held').hidden = true; renderTailNow(); }
  });
  $('#trace-detail-close').addEventListener('click', () => { state.selectedTrace = null; render(); });
  window.addEventListener('hashchange', () => {
    const run = runFromHash();
    if (run !== null && run !== state.run) selectRun(run);
  });
  let width = 0;
  new ResizeObserver(() => {
    const w = $('#waterfall-chart').clientWidth;
    if (Math.abs(w - width) > 4) { width = w; scheduleRender(); }
  }).observe(document.body);
  // Relative times ("3m ago") and slow-moving aggregates stay fresh even without new events.
  setInterval(() => scheduleAggregates(true), 15000);
  // Sink health changes without events (a collector going away): poll it on its own.
  setInterval(loadSinks, 5000);
}

async function start() {
  wire();
  setConn('connecting');
  await loadRuns();
  const fromHash = runFromHash();
  if (fromHash !== null) state.run = fromHash;
  else if (!state.runs.some((r) => r.id === 'live') && state.runs.length) state.run = state.runs[0].id;
  renderRunSelect();
  await Promise.all([loadEvents(), loadAggregates(), loadSinks()]);
  render();
  document.body.dataset.ready = 'true';
  if (streamDisabled()) setConn('off');
  else stream.start();
}

/**
 * `?stream=off` loads a snapshot without the live stream: for printing, sharing, and headless browsers
 * whose virtual time never advances while an EventSource is open (`chromium --virtual-time-budget`).
 */
function streamDisabled() {
  return new URLSearchParams(location.search).get('stream') === 'off';
}

function showError(error) {
  const banner = $('#app-error');
  banner.hidden = false;
  banner.textContent = `Dashboard error: ${error && error.message ? error.message : String(error)}`;
}
window.addEventListener('error', (event) => showError(event.error ?? event.message));
window.addEventListener('unhandledrejection', (event) => showError(event.reason));

start().catch(showError);
