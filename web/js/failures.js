// What the page says when the server refuses or cannot answer, where the data would be; and the titles
// that keep a long status line whole.
import { setText, setHidden } from './svg.js';

/**
 * What a failed request says, for the panels where its data would be: {status (0: no answer),
 * message (the server's, else the browser's), refused (the server refused the request itself: sending
 * it again would get the same answer), text (the sentence shown)}.
 */
export function failureOf(error) {
  const status = Number.isFinite(error?.status) ? error.status : 0;
  const message = error?.serverMessage || error?.message || String(error);
  const refused = status >= 400 && status < 500 && status !== 408 && status !== 429;
  const text = status === 0 ? `No answer from the server (${message}); asking again every 5 s.`
    : refused ? `The server refused this view (HTTP ${status}): ${message}. Change the filters to ask again.`
      : `The server could not answer (HTTP ${status}): ${message}; asking again every 5 s.`;
  return { status, message, refused, text };
}

/** Shows a failure where a panel's data would be (its empty-state line), or hands the line back. */
export function showFailure(empty, failure) {
  if (!failure) { if ('status' in empty.dataset) delete empty.dataset.status; return false; }
  setHidden(empty, false);
  setText(empty, failure.text);
  if (empty.dataset.status !== String(failure.status)) empty.dataset.status = String(failure.status);
  return true;
}

/** Status lines and alerts: cut with an ellipsis when long (style.css), their whole text is their title. */
const STATUS_LINES = '#filter-status, #filter-error, .panel-note, #footer-seq, #bin-calls-note, .app-error, .app-error p, .kpi-sub, .panel-empty, #bin-calls-title';

export function syncTitles() {
  for (const node of document.querySelectorAll(STATUS_LINES)) {
    const text = node.textContent;
    if (node.title !== text) node.title = text;
  }
}

