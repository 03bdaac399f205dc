// The dashboard API (interfaces.md "HTTPS endpoints") and the live event stream.

/** GET a JSON document relative to the page; throws an Error naming the path on failure. */
export async function getJSON(path, { timeoutMs = 10000 } = {}) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  try {
    const response = await fetch(path, { headers: { Accept: 'application/json' }, signal: controller.signal, cache: 'no-store' });
    if (!response.ok) {
      // The server's message names the bad parameter: keep it for the page to show.
      let message = '';
      try { message = (await response.json())?.error?.message ?? ''; } catch { /* not JSON */ }
      const error = new Error(`${path.split('?')[0]}: HTTP ${response.status}${message ? `: ${message}` : ''}`);
      error.status = response.status;
      error.serverMessage = message;
      throw error;
    }
    return await response.json();
  } catch (error) {
    if (error.name === 'AbortError') throw new Error(`${path}: timed out`);
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

/** A query string from an object, leaving out null and empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== null && v !== undefined && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** GET /api/events: {events, latestSeq}. */
export function events(params) {
  return getJSON(`api/events${query(params)}`);
}

/** GET /api/calls: {calls, counts, stats, latestSeq, epoch}, filtered like /api/events. */
export function calls(params) {
  return getJSON(`api/calls${query(params)}`);
}

/**
 * GET /api/placements?run=: {run, placements}, the run's totals; with filters (the parameters of
 * /api/calls), the totals over the matching calls, each row with `calls`.
 */
export function placements(run, filters = {}) {
  return getJSON(`api/placements${query({ ...filters, run })}`);
}

/**
 * GET /api/runs: {runs, next, matched, total, invocations}, newest first, one page (100 unless
 * `limit` says otherwise); `q`, `kind`, `status`, `invocation`, `order`, `cursor` as the server takes them.
 */
export function runs(params = {}) {
  return getJSON(`api/runs${query(params)}`);
}

/** GET /api/invocations: {invocations, total}, newest first. */
export function invocations(limit = 10) {
  return getJSON(`api/invocations${query({ limit })}`);
}

/** GET /api/sinks: {sinks: [{name, type, up, saturated, durable, consumed, dropped, errors, lastError, queueDepth, capacity}]}. */
export function sinks() {
  return getJSON('api/sinks');
}

/** GET /api/runs/{id}: {run, placements, eventsByName}. */
export function run(id) {
  return getJSON(`api/runs/${encodeURIComponent(id)}`);
}

/**
 * The SSE stream `/api/events/stream` over EventSource. EventSource reconnects by itself (sending
 * Last-Event-ID, so the server replays what was missed); if the browser gives up (the stream answered
 * with an error status), this reconnects with backoff. `onState` gets 'connecting', 'open' or 'closed';
 * `onHello` gets the server's `hello` message (its epoch) on every connection.
 */
export class LiveStream {
  constructor({ onEvents, onState, onOpen, onHello }) {
    this.onEvents = onEvents;
    this.onHello = onHello;
    this.onState = onState;
    this.onOpen = onOpen;
    this.source = null;
    this.retryMs = 1000;
    this.retryTimer = null;
    this.pending = [];
    this.flushScheduled = false;
  }

  start() {
    this.stop();
    this.onState('connecting');
    let source;
    try {
      source = new EventSource('api/events/stream');
    } catch {
      this.scheduleRetry();
      return;
    }
    this.source = source;
    source.onopen = () => {
      this.retryMs = 1000;
      this.onState('open');
      this.onOpen?.();
    };
    // The server's first message on every connection: {"epoch": "..."}, which changes when it restarts.
    source.addEventListener('hello', (message) => {
      try { this.onHello?.(JSON.parse(message.data)); } catch { /* not JSON: ignore */ }
    });
    source.onmessage = (message) => {
      let envelope;
      try {
        envelope = JSON.parse(message.data);
      } catch {
        return;
      }
      this.pending.push(envelope);
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        // Batch messages that arrive together into one update.
        setTimeout(() => {
          this.flushScheduled = false;
          const batch = this.pending;
          this.pending = [];
          this.onEvents(batch);
        }, 50);
      }
    };
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        this.onState('closed');
        this.scheduleRetry();
      } else {
        this.onState('connecting');
      }
    };
  }

  scheduleRetry() {
    if (this.retryTimer) return;
    const wait = this.retryMs;
    this.retryMs = Math.min(this.retryMs * 2, 30000);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.start();
    }, wait);
  }

  stop() {
    if (this.source) {
      this.source.onopen = this.source.onmessage = this.source.onerror = null;
      this.source.close();
      this.source = null;
    }
    if (this.retryTimer) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
  }
}
