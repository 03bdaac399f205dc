// The in-page event buffer (bounded, ordered by seq, without duplicates) and grouping of events into calls.

/** Events kept in the page; older ones are dropped first. */
export const MAX_EVENTS = 5000;

/** A bounded, seq-ordered buffer of envelopes. */
export class EventBuffer {
  constructor(capacity = MAX_EVENTS) {
    this.capacity = capacity;
    this.events = [];
    this.seqs = new Set();
    this.version = 0;
  }

  /** The highest seq held, or null. */
  get latestSeq() {
    return this.events.length ? this.events[this.events.length - 1].seq : null;
  }

  /** Adds envelopes (any order, duplicates ignored); returns the ones that were new, in seq order. */
  add(list) {
    const fresh = [];
    for (const e of list) {
      if (!isEnvelope(e) || this.seqs.has(e.seq)) continue;
      this.seqs.add(e.seq);
      fresh.push(e);
    }
    if (!fresh.length) return fresh;
    fresh.sort((a, b) => a.seq - b.seq);
    const last = this.latestSeq;
    if (last === null || fresh[0].seq > last) {
      for (const e of fresh) this.events.push(e);
    } else {
      this.events = this.events.concat(fresh).sort((a, b) => a.seq - b.seq);
    }
    if (this.events.length > this.capacity) {
      const removed = this.events.splice(0, this.events.length - this.capacity);
      for (const e of removed) this.seqs.delete(e.seq);
    }
    this.version += 1;
    return fresh;
  }

  /** Forgets everything. */
  clear() {
    this.events = [];
    this.seqs.clear();
    this.version += 1;
  }

  /** Events of a run (all runs when `run` is null), oldest first. */
  ofRun(run) {
    return run === null ? this.events : this.events.filter((e) => e.run === run);
  }
}

/** Whether a value looks like an envelope of events-and-metrics.md. */
export function isEnvelope(e) {
  return e !== null && typeof e === 'object' && Number.isFinite(e.seq) && typeof e.name === 'string';
}

const CALL_START = new Set(['fetch.start', 'preload.start']);
const CALL_END = new Set(['fetch.end', 'preload.end']);

/**
 * Groups events by trace into calls, newest call first, at most `limit`.
 * A call: { trace, run, placement, call, startT, endT, startTs, seq, source, errorCode, targetingLost,
 *   failed, requests: [{span, kind, placement, startT, endT, outcome, status, timeout}], timeouts: [{t, stage, placement}],
 *   fallbacks: [{t, to, reason, placement}], marks: [{t, name, placement}], events }
 */
export function groupCalls(events, limit = 30, nowT = null) {
  const byTrace = new Map();
  for (const e of events) {
    if (typeof e.trace !== 'string' || !e.trace) continue;
    let c = byTrace.get(e.trace);
    if (!c) {
      c = {
        trace: e.trace, run: e.run, placement: e.placement ?? null, call: null, startT: null, endT: null,
        firstT: e.t, lastT: e.t, startTs: e.ts, seq: e.seq, lastSeq: e.seq, source: null, errorCode: null,
        targetingLost: false, failed: null, hasCall: false, requests: [], timeouts: [], fallbacks: [], marks: [],
        spans: new Map(), events: [],
      };
      byTrace.set(e.trace, c);
    }
    c.events.push(e);
    c.lastSeq = e.seq;
    if (Number.isFinite(e.t)) {
      c.firstT = c.firstT === undefined || !Number.isFinite(c.firstT) ? e.t : Math.min(c.firstT, e.t);
      c.lastT = c.lastT === undefined || !Number.isFinite(c.lastT) ? e.t : Math.max(c.lastT, e.t);
    }
    const a = e.attrs && typeof e.attrs === 'object' ? e.attrs : {};
    if (CALL_START.has(e.name)) {
      c.hasCall = true;
      c.startT = e.t;
      c.startTs = e.ts;
      c.call = e.name === 'preload.start' ? 'preloadFlows' : (a.call ?? 'getFlow');
      if (e.placement) c.placement = e.placement;
      if (e.name === 'preload.start' && Array.isArray(a.placements)) c.placements = a.placements;
      if (Number.isFinite(a.loadTimeout)) c.loadTimeout = a.loadTimeout;
    } else if (CALL_END.has(e.name)) {
      c.hasCall = true;
      c.endT = e.t;
      if (!c.call) c.call = e.name === 'preload.end' ? 'preloadFlows' : (a.call ?? 'getFlow');
      if (e.name === 'fetch.end') {
        c.source = a.source ?? null;
        c.errorCode = a.errorCode ?? null;
        c.targetingLost = a.targetingLost === true;
        c.variation = a.variation ?? null;
        c.audience = a.audience ?? null;
      } else {
        c.failed = a.failed && typeof a.failed === 'object' ? a.failed : {};
        // `succeeded` is a count or the list of placements that succeeded.
        c.succeeded = Array.isArray(a.succeeded) ? a.succeeded.length : (Number.isFinite(a.succeeded) ? a.succeeded : null);
      }
      if (Number.isFinite(a.duration)) c.duration = a.duration;
    } else if (e.name === 'request.start') {
      const r = spanOf(c, e);
      r.startT = e.t;
      r.kind = a.kind ?? r.kind;
      r.timeout = a.timeout;
    } else if (e.name === 'request.end') {
      const r = spanOf(c, e);
      r.endT = e.t;
      r.kind = a.kind ?? r.kind;
      r.outcome = a.outcome ?? null;
      r.status = a.status ?? null;
      r.bytes = a.bytes;
      if (r.startT === null && Number.isFinite(a.duration)) r.startT = e.t - a.duration;
    } else if (e.name === 'timeout') {
      c.timeouts.push({ t: e.t, stage: a.stage, placement: e.placement, budget: a.budget });
    } else if (e.name === 'fallback') {
      c.fallbacks.push({ t: e.t, to: a.to, reason: a.reason, placement: e.placement });
    } else if (e.name === 'cache.hit' || e.name === 'cache.miss' || e.name === 'cache.expired') {
      c.marks.push({ t: e.t, name: e.name, placement: e.placement });
    }
  }
  const calls = [];
  for (const c of byTrace.values()) {
    if (!c.hasCall) continue;
    if (c.startT === null) { c.startT = c.firstT; c.truncated = true; }
    c.requests = [...c.spans.values()].filter((r) => r.startT !== null || r.endT !== null);
    for (const r of c.requests) if (r.startT === null) r.startT = c.startT;
    // Still open: up to the newest event seen (the engine clock's "now"), never past the budget.
    if (Number.isFinite(nowT)) {
      for (const r of c.requests) {
        if (r.endT === null) r.openUntil = clampOpen(r.startT, nowT, r.timeout);
      }
      if (c.endT === null) c.openUntil = clampOpen(c.startT, nowT, c.loadTimeout);
    }
    c.requests.sort((x, y) => x.startT - y.startT || x.seq - y.seq);
    delete c.spans;
    calls.push(c);
  }
  calls.sort((x, y) => y.seq - x.seq);
  return calls.slice(0, limit);
}

function clampOpen(start, nowT, budget) {
  const limit = Number.isFinite(budget) && budget > 0 ? start + budget : start + 60;
  return Math.max(start, Math.min(nowT, limit));
}

function spanOf(c, e) {
  const key = e.span || `seq${e.seq}`;
  let r = c.spans.get(key);
  if (!r) {
    r = { span: e.span, kind: null, placement: e.placement, startT: null, endT: null, outcome: null, status: null, seq: e.seq };
    c.spans.set(key, r);
  }
  return r;
}

/** fetch.end events of a list: [{duration, source ('error' when it failed), trace, placement}]. */
export function fetchDurations(events) {
  const out = [];
  for (const e of events) {
    if (e.name !== 'fetch.end' || !e.attrs) continue;
    const d = e.attrs.duration;
    if (!Number.isFinite(d)) continue;
    out.push({
      duration: d, source: e.attrs.errorCode !== undefined && e.attrs.errorCode !== null ? 'error' : (e.attrs.source ?? 'other'),
      trace: e.trace, placement: e.placement,
    });
  }
  return out;
}
