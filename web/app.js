// FlowScope dashboard: loads the selected run's aggregates and recent events, then follows the
// live stream. No dependencies, no build step; all data goes into the DOM through textContent.
import * as api from './js/api.js';
import * as fmt from './js/format.js';
import { EventBuffer, groupCalls, fetchDurations } from './js/store.js';
import { renderPlacements, renderSourceLegend } from './js/placements.js';
import { renderWaterfall, renderWaterfallLegend, renderTraceDetail } from './js/waterfall.js';
import { renderHistogram, markListedRange } from './js/histogram.js';
import { renderTail, setOptions, EVENT_NAMES } from './js/tail.js';
import { el, clear, setText, setHidden } from './js/svg.js';
import { renderStrategies, hasStrategies } from './js/strategies.js';
import * as filters from './js/filters.js';
import { createTestRuns } from './js/testruns.js';
import { createCompare } from './js/compare.js';
import { wireReproduce, resetReproduce } from './js/reproduce.js';
import * as url from './js/url.js';
import * as kpis from './js/kpis.js';
import * as hold from './js/hold.js';
import * as runs from './js/runs.js';
import * as bins from './js/bins.js';
import { failureOf, showFailure, syncTitles } from './js/failures.js';

const $ = (selector) => document.querySelector(selector);

const state = {
  run: 'live', // '' means all runs
  runs: [],
  runDetail: null,
  // The server answered 404 for the selected run's detail (no events, nothing stored, no saved simulation).
  runMissing: false,
  // Why the selected run could not be loaded (the server did not answer), or null.
  loadFailure: null,
  placements: [],
  /** The read model's totals of the run's calls (GET /api/placements `totals`). */
  totals: null,
  // The selected run's own events, loaded from the server per run: other runs never push them out.
  buffer: new EventBuffer(),
  // Every event the stream brought, for the tail when it shows other runs than the selected one.
  all: new EventBuffer(),
  // The open call: {trace, events: Map seq -> envelope}, kept apart from the buffers so that it stays
  // whole while newer events arrive.
  selected: null,
  wfCurrent: null, // the waterfall's tab stop (a trace)
  tailCurrent: null, // the tail's tab stop (a seq)
  paused: false,
  conn: 'connecting',
  loaded: false,
  error: null,
  epoch: null, // the server's epoch: another one means the server restarted (its seq starts again)
  cursor: null, // the server's latest seq when the buffer was filled
  loadToken: 0,
  offlineSince: null,
  // The filter bar (by URL key). With any filter set, every panel shows the server's answer for it.
  filters: {},
  // That answer: {events (of the matching calls), answer (GET /api/calls: stats), placements (GET
  // /api/placements with the filters), key (its query)}.
  query: null,
  zoom: null, // [from, to] seconds of the waterfall's axis, or null
  bin: null, // the histogram range whose calls are listed: {lo, hi, last, samples, at}, seconds (last: lo or longer)
};
const PAGE = 1000;
const MAX_PAGES = 12;

const WATERFALL_CALLS = 24;

// ---------------------------------------------------------------- run selector

/** The view in the URL's hash (js/url.js). */
function viewFromURL() {
  return url.viewFromHash(location.hash);
}

/** The hash of the current view. */
function viewHash() {
  return url.viewHash({
    run: state.run, call: state.selected?.trace ?? null, filters: state.filters, zoom: state.zoom,
    event: $('#filter-name').value, tailRun: $('#filter-run').value, compare: compare?.value() ?? '',
    compareRanges: compare?.ranges() ?? {},
  });
}

/** Records the view in the URL: a new history entry for a user's action, so Back returns to the view before. */
function recordView({ push = true } = {}) {
  const hash = viewHash();
  if (location.hash === hash) return;
  if (push) history.pushState(null, '', hash);
  else history.replaceState(null, '', hash);
}

/** Applies the URL's view (Back and Forward, a pasted link). */
async function applyURL() {
  const view = viewFromURL();
  const filtersChanged = JSON.stringify(view.filters) !== JSON.stringify(state.filters);
  if (filtersChanged) { state.filters = view.filters; filters.writeControls(state.filters); }
  ensureOption($('#filter-name'), view.event);
  if (view.tailRun !== null) ensureOption($('#filter-run'), view.tailRun); else $('#filter-run').value = '@view';
  if (view.run !== null && view.run !== state.run) await selectRun(view.run, { record: false });
  else if (filtersChanged) await filtersApplied();
  if ((view.call ?? null) !== (state.selected?.trace ?? null)) openCall(view.call, { record: false });
  if (JSON.stringify(view.zoom) !== JSON.stringify(state.zoom)) setZoom(view.zoom, { record: false });
  if (view.compare !== compare.value() || JSON.stringify(view.compareRanges) !== JSON.stringify(compare.ranges())) {
    compare.set(view.compare, view.compareRanges);
  }
  renderTailNow();
}

function ensureOption(select, value) {
  if (value && ![...select.options].some((o) => o.value === value)) select.add(new Option(value, value));
  select.value = value ?? '';
}

function renderRunSelect() {
  runs.fillRunSelect($('#run-select'), state.runs, state.run);
  renderBadge();

  const tailRun = $('#filter-run');
  setOptions(tailRun, state.runs.map((r) => r.id), 2);
  compare?.setRuns(state.runs);
}

/** The run's kind next to the picker; a run the server does not have is not given a kind. */
function renderBadge() {
  runs.renderBadge($('#run-kind'), runMissing() ? 'missing' : runKind(state.run));
}

/** Whether the selected run does not exist: the server has no detail for it and the page holds none of its events. */
function runMissing() {
  return state.runMissing && state.run !== '' && state.buffer.ofRun(state.run).length === 0 && state.placements.length === 0;
}

/** The run alert: the selected run could not be loaded, or it does not exist. */
function renderRunAlert() {
  const alert = $('#run-alert');
  const run = state.run || 'all runs';
  let text = '';
  if (state.loadFailure) {
    text = `Could not load run ${run}: ${state.loadFailure}. The panels below are empty until it loads; pick the run again to retry.`;
  } else if (runMissing()) {
    text = `Run ${run} does not exist: the server has no events, no stored events and no saved simulation with that id. Pick a run in the Run menu.`;
  }
  setHidden(alert, !text);
  setText(alert, text);
  const reason = state.loadFailure ? 'load-failed' : text ? 'missing' : '';
  if (alert.dataset.reason !== reason) alert.dataset.reason = reason;
}

function runKind(id) {
  return runs.runKind(id, state.runs);
}

/**
 * Shows `run`, from the fitted axis with no call open. `record`: a user's choice adds a history entry;
 * `replace` rewrites the current entry instead (the page reloads the run by itself, the URL must still
 * say what it shows); neither leaves the URL alone (it is the URL's view being applied).
 */
async function selectRun(run, { record = true, replace = false } = {}) {
  state.run = run;
  state.selected = null;
  clearZoom();
  if (record || replace) recordView({ push: !replace });
  renderRunSelect();
  state.buffer.clear();
  const token = ++state.loadToken;
  state.loadFailure = null;
  state.runMissing = false;
  renderRunAlert();
  state.query = null;
  closeBin();
  clearZoom();
  compare.refresh().catch(note);
  const [loaded] = await Promise.all([loadEvents(token), loadAggregates(), loadSinks(), queryMode() ? runQuery({ render: false }) : null]);
  if (token !== state.loadToken) return;
  if (!loaded) state.loadFailure = state.error?.message ?? 'the server did not answer';
  render({ force: true });
}

// ---------------------------------------------------------------- loading

/**
 * The runs the picker offers: the newest page (100), or the matches of the search box. The picker
 * never lists every run: the server pages them, the search box finds the rest.
 */
async function loadRuns() {
  const search = $('#run-search').value.trim();
  try {
    const answer = await api.runs(search ? { q: search, limit: 50 } : {});
    if (search !== $('#run-search').value.trim()) return; // a newer search is on its way
    state.runs = Array.isArray(answer.runs) ? answer.runs : [];
    renderRunSelect();
  } catch (error) {
    note(error);
  }
  testRuns?.refresh();
}

let testRuns = null;
/** The compare panel (js/compare.js), made in wire(). */
let compare = null;
let runSearchTimer = null;

/**
 * Shows every sink that is down (its last write or export failed), with its last error, and every
 * sink that is saturated (its queue overflowed or refused an ingest batch in the last 5 s).
 */
async function loadSinks() {
  const alert = $('#sink-alert');
  try {
    const answer = await api.sinks();
    const list = Array.isArray(answer.sinks) ? answer.sinks : [];
    const down = list.filter((s) => s.up === false);
    const saturated = list.filter((s) => s.up !== false && s.saturated === true);
    setHidden(alert, down.length + saturated.length === 0);
    const lines = down.map((s) => {
      const line = document.createElement('p');
      line.dataset.sink = s.name;
      line.textContent = `Sink ${s.name} (${s.type}) is down: ${s.lastError ?? 'its last write failed'}` +
        ` (${s.errors} errors, ${s.dropped} events lost). Events still reach the other sinks.`;
      return line;
    }).concat(saturated.map((s) => {
      const line = document.createElement('p');
      line.dataset.sink = s.name;
      line.dataset.saturated = 'true';
      line.textContent = `Sink ${s.name} (${s.type}) is saturated: it cannot keep up` +
        ` (${s.queueDepth} of ${s.capacity} queued, ${s.dropped} events lost).` +
        (s.durable ? ' Ingest is refused with 503 until it catches up.' : '');
      return line;
    }));
    const same = alert.children.length === lines.length && lines.every((line, i) => alert.children[i].textContent === line.textContent);
    if (!same) alert.replaceChildren(...lines);
  } catch (error) {
    // /api/sinks unreachable: the connection state already says so.
  }
}

const MISSING = Symbol('no such run');

async function loadAggregates() {
  const run = state.run === '' ? null : state.run;
  try {
    const [placements, detail] = await Promise.all([
      api.placements(run),
      // 404: the server has no such run ('live', the app's run, exists before its first event).
      run ? api.run(run).catch((error) => (error.status === 404 && run !== 'live' ? MISSING : null)) : Promise.resolve(null),
    ]);
    if ((placements.run ?? null) !== run && placements.run !== undefined) return; // a newer selection won
    if (run !== (state.run === '' ? null : state.run)) return;
    state.placements = Array.isArray(placements.placements) ? placements.placements : [];
    state.totals = placements.totals && typeof placements.totals === 'object' ? placements.totals : null;
    state.cut = cutOf(placements);
    state.runMissing = detail === MISSING;
    state.runDetail = detail === MISSING ? null : detail;
    state.error = null;
    state.aggregatesFailure = null;
  } catch (error) {
    state.aggregatesFailure = failureOf(error);
    note(error);
  }
}

/**
 * Loads the selected run's own events from the server (`GET /api/events?run=`): the newest page, and
 * when the run has more, pages forward from its start so the buffer holds its newest events whole.
 * Returns false when the server could not be asked.
 */
async function loadEvents(token = state.loadToken) {
  const run = state.run || null;
  try {
    const newest = await api.events({ limit: PAGE, run });
    if (token !== state.loadToken) return true;
    if (noteEpoch(newest.epoch)) return true;
    const list = Array.isArray(newest.events) ? newest.events : [];
    state.buffer.add(list);
    state.cursor = Number.isFinite(newest.latestSeq) ? newest.latestSeq : state.cursor;
    if (list.length >= PAGE) {
      const until = list[0].seq;
      let since = 0;
      for (let page = 0; page < MAX_PAGES; page += 1) {
        const answer = await api.events({ since, limit: PAGE, run });
        if (token !== state.loadToken) return true;
        const more = (Array.isArray(answer.events) ? answer.events : []).filter((e) => e.seq < until);
        state.buffer.add(more);
        if (more.length < PAGE) break;
        since = more[more.length - 1].seq;
      }
    }
    // The server caps what it keeps: when the buffer is full, it does not hold the whole last minute.
    state.pageLimited = state.buffer.events.length >= state.buffer.capacity;
    setLatestSeq(newest.latestSeq);
    state.loaded = true;
    return true;
  } catch (error) {
    note(error);
    return false;
  }
}

/** After the stream (re)opens: fetch the run's events that may have been missed while it was closed. */
async function fillGap() {
  const token = state.loadToken;
  try {
    for (let page = 0; page < MAX_PAGES; page += 1) {
      const since = state.cursor;
      if (since === null) return;
      const answer = await api.events({ since, limit: PAGE, run: state.run || null });
      if (token !== state.loadToken || noteEpoch(answer.epoch)) return;
      const list = Array.isArray(answer.events) ? answer.events : [];
      if (state.buffer.add(list).length) scheduleRender();
      if (list.length) state.cursor = Math.max(state.cursor, list[list.length - 1].seq);
      setLatestSeq(answer.latestSeq);
      if (list.length < PAGE) {
        if (Number.isFinite(answer.latestSeq)) state.cursor = Math.max(state.cursor, answer.latestSeq);
        return;
      }
    }
  } catch (error) {
    note(error);
  }
}

/**
 * Notes the server's epoch from an answer. Another epoch than the one the page loaded from means the
 * server restarted (its seq began again at 1): everything is loaded again. Returns true then.
 */
function noteEpoch(epoch) {
  if (typeof epoch !== 'string' || !epoch) return false;
  if (state.epoch === null) { state.epoch = epoch; return false; }
  if (epoch === state.epoch) return false;
  state.epoch = epoch;
  reloadAfterRestart();
  return true;
}

async function reloadAfterRestart() {
  const token = ++state.loadToken;
  state.buffer.clear();
  state.all.clear();
  state.cursor = null;
  latestSeq = null;
  await loadRuns();
  state.query = null;
  await Promise.all([loadEvents(token), loadAggregates(), loadSinks(), runQuery({ render: false })]);
  if (token === state.loadToken) render({ force: true });
}

let latestSeq = null;
/** Notes the latest seq; the footer line says it on the next redraw (`footer`: now). */
function setLatestSeq(seq, { footer = false } = {}) {
  if (Number.isFinite(seq) && (latestSeq === null || seq > latestSeq)) latestSeq = seq;
  if (document.body.dataset.latestSeq !== String(latestSeq ?? '')) document.body.dataset.latestSeq = latestSeq ?? '';
  if (footer) renderFooter();
}

function renderFooter() {
  const stale = state.offlineSince !== null ? ` · stale since ${fmt.clock(new Date(state.offlineSince).toISOString())}` : '';
  const paused = state.paused ? ' · paused' : '';
  setText($('#footer-seq'), `latest seq ${latestSeq === null ? '–' : fmt.count(latestSeq)} · ${fmt.count(state.buffer.events.length)} events of this run in page (max ${fmt.count(state.buffer.capacity)})${paused}${stale}`);
}

function note(error) {
  state.error = error;
  console.warn('FlowScope:', error);
}

// ---------------------------------------------------------------- live stream

function setConn(conn) {
  state.conn = conn;
  if (conn === 'open' || conn === 'off') state.offlineSince = null;
  else if (state.offlineSince === null && state.everOpen) state.offlineSince = Date.now();
  updateOffline();
  const node = $('#conn-state');
  node.dataset.state = conn;
  const texts = { open: 'Live', connecting: 'Connecting…', reconnecting: 'Reconnecting…', closed: 'Offline — retrying', off: 'Snapshot' };
  node.querySelector('.conn-text').textContent = texts[conn] ?? conn;
  node.title = conn === 'open' ? 'Connected to /api/events/stream'
    : conn === 'off' ? 'Live updates are off (?stream=off); reload without it to follow events'
      : 'The event stream is not connected; it reconnects by itself';
}

/**
 * The offline banner: shown once the stream has been down for more than 2 s (a reconnect blip is not
 * news), with the time since; every panel is marked stale meanwhile.
 */
function updateOffline() {
  const banner = $('#offline-banner');
  const since = state.offlineSince;
  const down = since !== null && Date.now() - since > 2000;
  setHidden(banner, !down);
  document.body.classList.toggle('is-stale', down);
  if (down) {
    const seconds = Math.round((Date.now() - since) / 1000);
    setText(banner, `Offline: no connection to the server for ${seconds} s (since ${fmt.clock(new Date(since).toISOString())}). ` +
      'Every panel shows data as of then; it updates by itself once the server answers again.');
  }
  renderFooter();
}

const stream = new api.LiveStream({
  onState: (s) => setConn(s === 'connecting' && state.everOpen ? 'reconnecting' : s),
  onOpen: () => { state.everOpen = true; fillGap(); },
  onHello: (hello) => noteEpoch(hello?.epoch),
  onEvents: (batch) => {
    const valid = batch.filter((e) => e && Number.isFinite(e.seq));
    if (!valid.length) return;
    // The open run was read from the server's stored events (numbered by the file, not by the stream):
    // new events of it mean the server now holds it in memory, so load it again from there.
    const storedRun = state.run !== '' && state.runs.some((r) => r.id === state.run && r.stored) &&
      valid.some((e) => e.run === state.run);
    state.all.add(valid);
    const last = valid[valid.length - 1].seq;
    state.cursor = state.cursor === null ? last : Math.max(state.cursor, last);
    setLatestSeq(last);
    const fresh = state.buffer.add(state.run === '' ? valid : valid.filter((e) => e.run === state.run));
    let callChanged = false;
    if (state.selected) {
      for (const e of valid) {
        if (e.trace === state.selected.trace && !state.selected.events.has(e.seq)) { state.selected.events.set(e.seq, e); callChanged = true; }
      }
    }
    if (storedRun) {
      // Reloaded from memory: the zoom and the open call were of the stored events, so they go, and
      // the URL says so without a new history entry (a copied link reopens what the page shows).
      state.runs = state.runs.map((r) => (r.id === state.run ? { ...r, stored: false } : r));
      state.runsStale = true;
      selectRun(state.run, { replace: true });
      return;
    }
    // A run the picker does not know yet (while a search narrows the picker, its matches do not change with traffic).
    const newRun = !$('#run-search').value.trim() && valid.some((e) => !state.runs.some((r) => r.id === e.run));
    scheduleAggregates(newRun);
    if (queryMode() && (state.run === '' || valid.some((e) => e.run === state.run))) scheduleQuery();
    if (fresh.length || callChanged || state.run === '' || $('#filter-run').value !== '@view') scheduleRender();
  },
});

/** The placements table and the KPIs are asked again at most every 2 s while events arrive. */
const AGGREGATES_INTERVAL = 2000;
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
  }, AGGREGATES_INTERVAL);
}

// ---------------------------------------------------------------- rendering

/** Redraws at most twice a second: live data moves no faster than a reader follows it. */
const RENDER_INTERVAL = 1000;
/** What each panel last drew (a key of its data), so that an unchanged panel is not drawn again. */
const drawn = { strategies: undefined, placements: null, waterfall: null, histogram: null };
let renderQueued = false;
let lastRender = 0;
function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  const wait = Math.max(0, RENDER_INTERVAL - (performance.now() - lastRender));
  setTimeout(() => requestAnimationFrame(() => { renderQueued = false; lastRender = performance.now(); render(); }), wait);
}

function viewEvents() {
  if (queryMode()) return state.query?.events ?? [];
  return state.buffer.ofRun(state.run === '' ? null : state.run);
}

// ---------------------------------------------------------------- filters (server-side)

/** Whether a filter or time range is set: then every panel shows what the server answers for it. */
function queryMode() {
  return filters.active(state.filters);
}

function queryParams() {
  return filters.apiParams(state.filters, state.run, state.runs.find((r) => r.id === state.run));
}

let queryTimer = null;
let queryAt = -Infinity;
let queryToken = 0;
/** Asks the server again, at most once a second, and not while paused (Resume asks). */
function scheduleQuery() {
  if (!queryMode() || state.paused || queryTimer) return;
  // A refused filter (400, 413, 414, ...) is not sent again until it changes; a busy or unreachable
  // server (429, 503, no answer) is asked again, at most every 5 s.
  const failure = state.query?.failure;
  if (failure && failure.refused && state.query.key === JSON.stringify(queryParams())) return;
  const wait = Math.max(0, (failure ? 5000 : 1000) - (performance.now() - queryAt));
  queryTimer = setTimeout(() => {
    queryTimer = null;
    // Refused while this one waited: not sent again.
    const refused = state.query?.failure?.refused && state.query.key === JSON.stringify(queryParams());
    if (!state.paused && !refused) runQuery().catch(note);
  }, wait);
}

/**
 * Fetches the filtered view: the events of the matching calls (waterfall, tail) and the calls' stats
 * (KPIs, histogram). A 400 names the bad parameter under the filter bar.
 */
async function runQuery({ render: draw = true, force = false } = {}) {
  if (!queryMode()) return;
  if (queryTimer) { clearTimeout(queryTimer); queryTimer = null; }
  const token = ++queryToken;
  queryAt = performance.now();
  const params = queryParams();
  const key = JSON.stringify(params);
  try {
    const [page, answer, table] = await Promise.all([
      api.events({ ...params, limit: PAGE }), api.calls({ ...params, limit: 1 }), api.placements(params.run, params),
    ]);
    if (token !== queryToken) return;
    if (noteEpoch(page.epoch)) return;
    state.query = {
      events: Array.isArray(page.events) ? page.events.filter((e) => e && Number.isFinite(e.seq)) : [], answer, key,
      placements: Array.isArray(table.placements) ? table.placements : [],
      cut: cutOf(table),
    };
    setLatestSeq(answer.latestSeq);
    showFilterError(null);
  } catch (error) {
    if (token !== queryToken) return;
    const failure = failureOf(error);
    state.query = { events: [], answer: null, placements: [], key, failure };
    showFilterError(failure.refused ? failure.message : null);
    note(error);
  }
  if (draw) render({ force });
}

/** What an answer read when the server's bound cut it (its `coverage`, when `counts.windowFull`), or null. */
function cutOf(answer) {
  if (!answer?.counts?.windowFull) return null;
  return answer.coverage && typeof answer.coverage === 'object' ? answer.coverage : {};
}

/**
 * A range (or the run) cut by the server's bound is said in the panels whose numbers it cuts: the
 * placements table, and with a filter the histogram.
 */
function renderCutNotes() {
  const cut = queryMode() ? state.query?.cut ?? null : state.cut ?? null;
  const whole = state.filters.range ? 'the whole time range' : 'the whole run';
  const text = cut ? `Cut by the server's bound: these numbers count the newest ${fmt.count(cut.events ?? 0)} events of the run` +
    `${cut.from ? ` (from ${fmt.clock(cut.from).slice(0, 8)})` : ''}, not ${whole}; older calls are left out.` : '';
  for (const node of document.querySelectorAll('#placements .cut-note, #histogram .cut-note')) {
    const shown = Boolean(cut) && (queryMode() || node.closest('#placements') !== null);
    setHidden(node, !shown);
    setText(node, shown ? text : '');
  }
}

/** The failure to show in the call panels instead of their data, or null. */
function panelFailure() {
  if (queryMode()) return state.query?.failure ?? null;
  return state.aggregatesFailure ?? null;
}

function showFilterError(message) {
  const node = $('#filter-error');
  node.hidden = !message;
  node.textContent = message ? `The server refused the filters: ${message}` : '';
  syncTitles();
}

/** A filter control changed: new URL entry, then the server's answer for the new filters. */
function onFilterChange() {
  const next = filters.readControls();
  if (JSON.stringify(next) === JSON.stringify(state.filters)) return;
  state.filters = next;
  clearZoom(); // a zoom is of the calls shown: a new filter shows others
  recordView();
  filtersApplied().catch(note);
}

/** After the filters changed: back to the live buffer when none is left, else ask the server (even paused). */
async function filtersApplied() {
  closeBin();
  clearZoom();
  if (!queryMode()) {
    state.query = null;
    showFilterError(null);
    render({ force: true });
    return;
  }
  await runQuery({ force: true });
}

function renderFilterStatus() {
  const node = $('#filter-status');
  if (!queryMode()) { node.textContent = 'Showing every call of the run. Filters and the time range apply to every panel below.'; return; }
  const counts = state.query?.answer?.counts;
  const what = filters.describe(state.filters);
  if (!counts) { node.textContent = `Filtered: ${what}`; return; }
  const partial = counts.windowFull ? ` (among the newest ${fmt.count(counts.scannedEvents)} events of the run)` : '';
  node.textContent = `${fmt.count(counts.matched)} of ${fmt.count(counts.scannedCalls)} calls match ${what}${partial}.`;
}

// ---------------------------------------------------------------- histogram drill-down

/**
 * Lists the calls of a histogram bin (exactly the calls counted in it when clicked). The list keeps its
 * range of durations, [lo, hi) seconds: each redraw highlights that range, wherever new calls move the
 * bins, so the highlight and the list always mean the same calls' range.
 */
function openBin(bin) {
  state.bin = { lo: bin.lo, hi: bin.hi, last: bin.last, samples: bin.samples.slice(), at: new Date().toISOString() };
  bins.renderBin($('#bin-calls'), state.bin, selectTrace);
  markListedRange($('#histogram-chart svg.histogram'), state.bin);
}

function closeBin() {
  state.bin = null;
  bins.renderBin($('#bin-calls'), state.bin, selectTrace);
  markListedRange($('#histogram-chart svg.histogram'), null);
}

/** Samples for the histogram: the server's durations of the matching calls, or the page's fetch.end events. */
function histogramSamples(events) {
  if (!queryMode()) return fetchDurations(events);
  const durations = state.query?.answer?.stats?.durations;
  if (!Array.isArray(durations)) return [];
  return durations.filter((d) => Array.isArray(d) && Number.isFinite(d[0]))
    .map(([duration, source, trace, placement]) => ({ duration, source, trace, placement }));
}

/** Back to the fitted axis without a redraw (the caller redraws). */
function clearZoom() {
  state.zoom = null;
  updateZoomControls();
}

/** Zooms the waterfall's axis to [from, to] (null: the fitted axis); a user's zoom is a history entry. */
function setZoom(zoom, { record = true } = {}) {
  state.zoom = zoom;
  if (record) recordView();
  renderWaterfallNow({ force: true });
}

/** The narrowest axis span a zoom in reaches (seconds). */
const MIN_ZOOM_SPAN = 0.001;

/** The waterfall's axis as drawn: {min, max, fit} seconds, or null when no call is drawn. */
function waterfallAxis() {
  const root = $('#waterfall-chart svg.waterfall');
  if (!root) return null;
  const axis = { min: Number(root.dataset.axisMin), max: Number(root.dataset.axisMax), fit: Number(root.dataset.fitMax) };
  return Object.values(axis).every(Number.isFinite) && axis.max > axis.min ? axis : null;
}

/**
 * The zoom buttons do what + , − and 0 do on a row; each is disabled when it would change nothing:
 * Zoom in without calls or at the narrowest span, Zoom out and Reset zoom on the fitted axis.
 */
function updateZoomControls() {
  const axis = waterfallAxis();
  const disable = (button, off) => { if (button.disabled !== off) button.disabled = off; };
  disable($('#wf-zoom-in'), !axis || axis.max - axis.min <= MIN_ZOOM_SPAN + 1e-12);
  disable($('#wf-zoom-out'), !axis || !state.zoom);
  disable($('#wf-reset-zoom'), !state.zoom);
}

/**
 * The keyboard's (and the zoom buttons') zoom on the waterfall: `factor` 0.5 halves the axis span
 * (keeping its start), 2 doubles it, up to the fitted axis (then the zoom is gone).
 */
function zoomBy(factor) {
  const axis = waterfallAxis();
  if (!axis) return;
  const { min, max, fit } = axis;
  const span = Math.max((max - min) * factor, MIN_ZOOM_SPAN);
  let from = min;
  let to = min + span;
  if (to > fit) { to = fit; from = Math.max(0, fit - span); }
  setZoom(from <= 1e-9 && to >= fit - 1e-9 ? null : [from, to]);
}

/**
 * Redraws every panel from the buffers. Paused, nothing moves (the open call still opens and closes).
 * A panel under the pointer holds still; the row that has the focus keeps it (rows are keyed by trace
 * and seq), so a redraw never sends the focus back to the page.
 */
function render({ force = false } = {}) {
  renderFooter();
  if (state.paused && !force) return;
  const events = viewEvents();
  const missing = runMissing();
  const nothing = !missing && state.loaded && state.buffer.events.length === 0 && state.placements.length === 0
    && !hasStrategies(state.runDetail) && !state.runs.some((r) => r.events > 0 || r.kind === 'simulation');
  setHidden($('#empty-state'), !nothing);
  document.body.classList.toggle('is-empty', nothing);
  renderBadge();
  renderRunAlert();

  // Each panel is drawn again only when what it shows changed.
  if (drawn.strategies !== state.runDetail) {
    drawn.strategies = state.runDetail;
    renderStrategies($('#strategies'), state.runDetail);
  }
  // With a filter, the placements of the matching calls (their counts are calls, a preload's too).
  const rows = queryMode() ? state.query?.placements ?? [] : state.placements;
  const failure = panelFailure();
  const placementsKey = JSON.stringify([rows, queryMode(), failure]);
  if (drawn.placements !== placementsKey) {
    drawn.placements = placementsKey;
    renderPlacements($('#placements'), rows, { calls: queryMode() });
    showFailure($('#placements .panel-empty'), failure);
  }
  // A saved simulation has no events (no calls): its strategies are the whole story, and the
  // call panels, the Calls filter bar and Pause (nothing there moves) would do nothing. A run that
  // does not exist has nothing to show either.
  const simulationOnly = hasStrategies(state.runDetail) && state.run !== '' && state.buffer.ofRun(state.run).length === 0;
  for (const id of ['#summary', '#placements', '#waterfall', '.split', '#filters']) setHidden($(id), simulationOnly || missing);
  setHidden($('#pause'), simulationOnly);
  const view = missing ? 'missing' : simulationOnly ? 'simulation' : 'calls';
  if (document.body.dataset.view !== view) document.body.dataset.view = view;
  renderKpis(events);

  renderFilterStatus();
  renderCutNotes();
  // Forced (a user's change of run, filter or pause): redrawn even under the pointer.
  renderWaterfallNow({ force });
  renderDetail();

  renderHistogramNow(events, { force });
  updateFilterOptions();
  // While the user reads older rows (scrolled down) or points at one, the tail holds still; back at the
  // top it follows again.
  const tailHeld = $('.tail-wrap').scrollTop > 4 || hold.held('tail');
  if (!tailHeld) renderTailNow();
  setHidden($('#tail-held'), !tailHeld);
  if (tailHeld) setText($('#tail-held'), hold.held('tail') ? hold.heldNote('tail') : '· held while you read it');
  syncTitles();
}

/**
 * Draws the time-to-flow histogram, unless the pointer is on it (then it holds still, as the waterfall
 * does, so that a bar is not redrawn between the press and the release of a click) and nothing forces it.
 */
function renderHistogramNow(events, { force = false } = {}) {
  const histogramHeld = !force && hold.held('histogram') && $('#histogram-chart g.bin');
  setHidden($('#histogram-held'), !histogramHeld);
  if (histogramHeld) { setText($('#histogram-held'), hold.heldNote('histogram')); return; }
  const samples = histogramSamples(events);
  const first = samples[0];
  const last = samples[samples.length - 1];
  const failure = panelFailure();
  const key = JSON.stringify([samples.length, first?.trace, first?.duration, last?.trace, last?.duration, $('#histogram-chart').clientWidth,
    state.bin && [state.bin.lo, state.bin.hi, state.bin.last], queryMode(), failure?.text]);
  if (!force && drawn.histogram === key) return;
  drawn.histogram = key;
  const focusedBin = document.activeElement?.closest?.('#histogram-chart g.bin')?.dataset.index;
  const h = renderHistogram($('#histogram-chart'), samples, {
    onBin: openBin, current: focusedBin !== undefined ? Number(focusedBin) : undefined, listed: state.bin,
    axisTitle: queryMode() ? 'call duration (fetches and preloads)' : 'fetch.end duration',
  });
  if (focusedBin !== undefined) $('#histogram-chart g.bin[tabindex="0"]')?.focus({ preventScroll: true });
  setHidden($('#histogram .panel-empty'), samples.length > 0);
  setText($('#histogram .panel-empty'), queryMode() ? 'No finished call matches these filters.' : 'No fetch.end events in this run yet.');
  showFailure($('#histogram .panel-empty'), failure);
  setText($('#histogram-note'), !samples.length ? ''
    : queryMode() ? `${fmt.count(h.count)} matching calls · p50 ${fmt.duration(h.p50)} · p95 ${fmt.duration(h.p95)} · click a bar for its calls`
      : `${fmt.count(h.count)} calls in page · p50 ${fmt.duration(h.p50)} · p95 ${fmt.duration(h.p95)} · click a bar for its calls`);
}

/** Draws the waterfall, unless the pointer is on it (then it holds still) and nothing forces it. */
function renderWaterfallNow({ force = false } = {}) {
  const events = viewEvents();
  const nowT = events.length ? events[events.length - 1].t : null;
  const wf = $('#waterfall');
  const chart = $('#waterfall-chart');
  const wfHeld = !force && hold.held('waterfall') && chart.querySelector('g.wf-call');
  setHidden($('#waterfall-held'), !wfHeld);
  if (wfHeld) setText($('#waterfall-held'), hold.heldNote('waterfall'));
  if (wfHeld) { markSelected(); return; }
  const calls = groupCalls(events, WATERFALL_CALLS, nowT);
  // Drawn again only when a call, the width, the zoom, the open call or the failure changed.
  const open = calls.some((c) => c.endT === null || c.endT === undefined);
  const failure = panelFailure();
  const key = JSON.stringify([calls.map((c) => `${c.trace}:${c.lastSeq}`), open ? nowT : null, chart.clientWidth, state.zoom,
    state.selected?.trace ?? null, queryMode(), failure?.text]);
  if (!force && drawn.waterfall === key) return;
  drawn.waterfall = key;
  const focused = document.activeElement?.closest?.('#waterfall-chart g.wf-call')?.dataset.trace;
  const root = renderWaterfall(chart, calls, {
    onSelect: selectTrace, onCurrent: (trace) => { state.wfCurrent = trace; },
    selected: state.selected?.trace, current: focused ?? state.wfCurrent, zoom: state.zoom, onZoom: (from, to) => setZoom([from, to]),
  });
  if (focused !== undefined) chart.querySelector('g.wf-call[tabindex="0"]')?.focus({ preventScroll: true });
  const empty = wf.querySelector(':scope > .panel-empty');
  setHidden(empty, calls.length > 0);
  setText(empty, queryMode() ? 'No call matches these filters.' : 'No calls in this run yet.');
  showFailure(empty, failure);
  updateZoomControls();
  const cut = Number(root?.dataset.cut ?? 0);
  const how = 'drag on the axis or press + / − to zoom';
  setText($('#waterfall-note'), state.zoom ? `zoomed to ${fmt.duration(state.zoom[0])} – ${fmt.duration(state.zoom[1])} · − zooms out`
    : cut ? `axis fits the calls: ${cut} longer one${cut === 1 ? '' : 's'} cut (») · ${how}` : how);
}

/** The selected class on waterfall rows, without redrawing them. */
function markSelected() {
  for (const g of document.querySelectorAll('#waterfall-chart g.wf-call')) {
    const on = g.dataset.trace === state.selected?.trace;
    g.classList.toggle('selected', on);
    g.setAttribute('aria-selected', String(on));
  }
}

let detailDrawn = null;
/** Draws the open call; only when it changed (new events, another width), so text selected in it stays. */
function renderDetail() {
  const panel = $('#trace-detail');
  const drawn = state.selected ? `${state.selected.trace}:${state.selected.events.size}:${$('#waterfall').clientWidth}` : null;
  if (drawn === detailDrawn && (drawn === null) === panel.hidden) return;
  detailDrawn = drawn;
  if (!state.selected) { renderTraceDetail(panel, null); return; }
  const events = [...state.selected.events.values()].sort((a, b) => a.seq - b.seq);
  const call = groupCalls(events, 1, events.length ? events[events.length - 1].t : null)[0] ?? null;
  if (call) { renderTraceDetail(panel, call); return; }
  renderTraceDetail(panel, null);
  panel.hidden = false;
  panel.dataset.trace = state.selected.trace;
  panel.querySelector('h3').textContent = `trace ${state.selected.trace}: none of this call's events are loaded for this run`;
}

/** Opens the call of `trace` (null closes it): its events as loaded now, kept whole from here on. */
function openCall(trace, { record = true } = {}) {
  if (trace !== (state.selected?.trace ?? null)) resetReproduce($('#trace-detail'));
  if (!trace) {
    state.selected = null;
  } else {
    const events = new Map();
    for (const list of [state.buffer.events, state.all.events, state.query?.events ?? []]) {
      for (const e of list) if (e.trace === trace) events.set(e.seq, e);
    }
    state.selected = { trace, events };
    // Not in the page (an older call, a stored run, a call listed from the histogram): ask the server.
    loadCall(trace).catch(note);
  }
  if (record) recordView();
  markSelected();
  renderDetail();
}

/** Adds the open call's events as the server holds them. */
async function loadCall(trace) {
  const answer = await api.events({ trace, run: state.run || null, limit: PAGE });
  if (state.selected?.trace !== trace) return;
  const before = state.selected.events.size;
  for (const e of Array.isArray(answer.events) ? answer.events : []) if (e && e.trace === trace) state.selected.events.set(e.seq, e);
  if (state.selected.events.size !== before) renderDetail();
}

function selectTrace(trace) {
  openCall(state.selected?.trace === trace ? null : trace);
  if (state.selected) $('#trace-detail').scrollIntoView({ block: 'nearest' });
}

/** Closes the open call and gives the focus back to its row (or the waterfall). */
function closeCall() {
  const trace = state.selected?.trace;
  openCall(null);
  const chart = $('#waterfall-chart');
  const row = [...chart.querySelectorAll('g.wf-call')].find((g) => g.dataset.trace === trace) ?? chart.querySelector('g.wf-call[tabindex="0"]');
  row?.focus({ preventScroll: true });
}

function renderKpis(events) {
  if (queryMode()) { kpis.renderQueryKpis(state.query, events, PAGE); return; }
  kpis.renderRunKpis({
    totals: state.totals, placements: state.placements, runDetail: state.runDetail, run: state.run, runs: state.runs, events,
    capped: state.pageLimited || state.buffer.events.length >= state.buffer.capacity,
  });
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
  const filters = tailFilters();
  const ownRun = filters.run === (state.run === '' ? null : state.run);
  const source = ownRun && queryMode() ? (state.query?.events ?? []) : ownRun ? state.buffer.events : state.all.events;
  const focused = document.activeElement?.closest?.('#tail tbody tr')?.dataset.seq;
  const tbody = $('#tail tbody');
  renderTail($('#tail'), source, filters, {
    onSelect: (trace) => selectTrace(trace), onCurrent: (seq) => { state.tailCurrent = seq; },
    current: focused !== undefined ? Number(focused) : state.tailCurrent,
  });
  if (focused !== undefined) tbody.querySelector('tr[tabindex="0"]')?.focus({ preventScroll: true });
  const empty = $('#tail .panel-empty');
  if (!showFailure(empty, ownRun ? panelFailure() : null)) empty.textContent = 'No events match these filters.';
}

function updateFilterOptions() {
  const placements = new Set(state.placements.map((p) => p.placement));
  for (const e of state.buffer.events) if (e.placement) placements.add(e.placement);
  const select = $('#filter-placement');
  if (select.value) placements.add(select.value);
  const sorted = [...placements].sort();
  if (select.options.length - 1 !== sorted.length) setOptions(select, sorted);
}

// ---------------------------------------------------------------- start

function wire() {
  renderSourceLegend($('#source-legend'));
  renderWaterfallLegend($('#waterfall-legend'));
  setOptions($('#filter-name'), EVENT_NAMES);
  $('#run-select').addEventListener('change', (event) => selectRun(event.target.value));
  for (const [id] of filters.FIELDS) $(`#${id}`).addEventListener('change', onFilterChange);
  // From … to …: its two inputs show while it is chosen.
  $('#f-range').addEventListener('change', () => { $('#f-custom').hidden = $('#f-range').value !== 'custom'; });
  $('#filter-form').addEventListener('submit', (event) => { event.preventDefault(); onFilterChange(); });
  $('#f-clear').addEventListener('click', () => { filters.writeControls({}); onFilterChange(); });
  // The zoom buttons act as + , − and 0 on a row. A button that its own press disables (Zoom out back
  // to the fitted axis, Reset zoom) hands the focus to Zoom in, so that it never falls back to the page.
  for (const [id, act] of [['#wf-zoom-in', () => zoomBy(0.5)], ['#wf-zoom-out', () => zoomBy(2)], ['#wf-reset-zoom', () => setZoom(null)]]) {
    $(id).addEventListener('click', () => {
      act();
      const button = $(id);
      if (!button.disabled || (document.activeElement !== button && document.activeElement !== document.body)) return;
      const next = [$('#wf-zoom-in'), $('#waterfall-chart g.wf-call[tabindex="0"]')].find((n) => n && !n.disabled);
      next?.focus({ preventScroll: true });
    });
  }
  // On the waterfall: + (or =) zooms in, - zooms out, 0 returns to the fitted axis.
  $('#waterfall-chart').addEventListener('keydown', (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const factor = { '+': 0.5, '=': 0.5, '-': 2, _: 2 }[event.key];
    if (factor === undefined && event.key !== '0') return;
    event.preventDefault();
    if (factor === undefined) setZoom(null); else zoomBy(factor);
    $('#waterfall-chart g.wf-call[tabindex="0"]')?.focus({ preventScroll: true });
  });
  $('#bin-calls-close').addEventListener('click', () => {
    closeBin();
    // The tab stop is the bar where the listed range started (as the chart now draws it).
    $('#histogram-chart g.bin[tabindex="0"]')?.focus({ preventScroll: true });
  });
  $('#filter-name').addEventListener('change', () => { recordView(); renderTailNow(); });
  $('#filter-run').addEventListener('change', async () => {
    recordView();
    await loadTailRun();
    renderTailNow();
  });
  $('#pause').addEventListener('click', () => {
    state.paused = !state.paused;
    const button = $('#pause');
    button.setAttribute('aria-pressed', String(state.paused));
    button.textContent = state.paused ? 'Resume' : 'Pause';
    document.body.classList.toggle('is-paused', state.paused);
    render({ force: !state.paused });
    if (!state.paused) scheduleQuery();
    else if (queryTimer) { clearTimeout(queryTimer); queryTimer = null; }
  });
  $('.tail-wrap').addEventListener('scroll', () => {
    if ($('.tail-wrap').scrollTop <= 4 && !$('#tail-held').hidden && !hold.held('tail')) scheduleRender();
  });
  // The panel under the pointer holds still, so the row the user is about to click stays where it is.
  for (const [key, selector] of [['waterfall', '#waterfall-chart'], ['histogram', '#histogram-chart'], ['tail', '.tail-wrap']]) {
    hold.wire(key, $(selector), $(`#${key}-held`), scheduleRender);
  }
  $('#trace-detail-close').addEventListener('click', closeCall);
  wireReproduce($('#trace-detail'));
  testRuns = createTestRuns($('#test-runs'), { onPick: (id) => { selectRun(id).catch(note); } });
  compare = createCompare($('#compare'), { current: () => state.run, paused: () => state.paused, onChange: () => recordView() });
  $('#run-search').addEventListener('input', () => {
    clearTimeout(runSearchTimer);
    runSearchTimer = setTimeout(() => { loadRuns().catch(note); }, 250);
  });
  // The skip link moves the focus without touching the URL's hash (which holds the view).
  $('.skip-link').addEventListener('click', (event) => { event.preventDefault(); $('#main').focus(); });
  document.addEventListener('keydown', (event) => {
    if (event.key === 'Escape' && state.selected) { event.preventDefault(); closeCall(); return; }
    if (event.key === 'Escape' && state.bin) { event.preventDefault(); $('#bin-calls-close').click(); }
  });
  window.addEventListener('popstate', () => { applyURL().catch(note); });
  setInterval(updateOffline, 1000);
  let width = 0;
  new ResizeObserver(() => {
    const w = $('#waterfall-chart').clientWidth;
    if (Math.abs(w - width) > 4) { width = w; scheduleRender(); }
  }).observe(document.body);
  // Relative times ("3m ago") and slow-moving aggregates stay fresh even without new events.
  setInterval(() => scheduleAggregates(true), 15000);
  // A relative time range moves on without new events.
  setInterval(() => { if (state.filters.range) scheduleQuery(); }, 5000);
  // Sink health changes without events (a collector going away): poll it on its own.
  setInterval(loadSinks, 5000);
}

/** The tail's own run (not the selected one): its newest events from the server. */
async function loadTailRun() {
  const choice = $('#filter-run').value;
  if (choice === '@view') return;
  try {
    const answer = await api.events({ limit: PAGE, run: choice || null });
    state.all.add(Array.isArray(answer.events) ? answer.events : []);
  } catch (error) { note(error); }
}

async function start() {
  wire();
  setConn('connecting');
  await loadRuns();
  const view = viewFromURL();
  if (view.run !== null) state.run = view.run;
  else if (!state.runs.some((r) => r.id === 'live') && state.runs.length) state.run = state.runs[0].id;
  renderRunSelect();
  state.filters = view.filters;
  filters.writeControls(state.filters);
  state.zoom = view.zoom;
  updateZoomControls();
  ensureOption($('#filter-name'), view.event);
  if (view.tailRun !== null) ensureOption($('#filter-run'), view.tailRun);
  compare.set(view.compare, view.compareRanges);
  await Promise.all([loadEvents(), loadAggregates(), loadSinks(), loadTailRun(), runQuery({ render: false })]);
  if (view.call) openCall(view.call, { record: false });
  recordView({ push: false });
  render({ force: true });
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
  banner.title = banner.textContent;
}
window.addEventListener('error', (event) => showError(event.error ?? event.message));
window.addEventListener('unhandledrejection', (event) => showError(event.reason));

start().catch(showError);
