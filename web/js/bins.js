// The calls of a histogram range (a clicked bar), kept as counted at the click.
import { el, clear } from './svg.js';
import * as fmt from './format.js';

/** Calls listed at most. */
export const BIN_ROWS = 200;
/**
 * Fills the list of a histogram range's calls (`bin`: {lo, hi, last, samples, at}; null hides it), longest
 * first, at most BIN_ROWS; a call's button calls `onSelect(trace)`.
 */
export function renderBin(panel, bin, onSelect) {
  const list = panel.querySelector('ul');
  clear(list);
  const note = panel.querySelector('#bin-calls-note');
  if (!bin) { panel.hidden = true; delete panel.dataset.lo; delete panel.dataset.hi; note.textContent = ''; return; }
  const b = bin;
  panel.hidden = false;
  panel.dataset.lo = b.lo;
  if (b.last) delete panel.dataset.hi; else panel.dataset.hi = b.hi;
  const range = b.last ? `${fmt.duration(b.lo)} or longer` : `${fmt.duration(b.lo)} to ${fmt.duration(b.hi)}`;
  panel.querySelector('#bin-calls-title').textContent = `${fmt.count(b.samples.length)} call${b.samples.length === 1 ? '' : 's'} of ${range}`;
  note.textContent = `Calls ${b.last ? `of ${fmt.duration(b.lo)} or longer` : `from ${fmt.duration(b.lo)} to under ${fmt.duration(b.hi)}`}` +
    ` as counted at ${fmt.clock(b.at).slice(0, 8)}; the chart keeps this range highlighted as new calls rescale it.`;
  const sorted = b.samples.slice().sort((x, y) => y.duration - x.duration);
  for (const sample of sorted.slice(0, BIN_ROWS)) {
    const li = el('li');
    const button = el('button', 'bin-call', null, { type: 'button', 'data-trace': sample.trace ?? '', 'data-duration': sample.duration });
    button.appendChild(el('span', 'mono bin-call-placement', sample.placement ?? '—', { title: sample.placement ?? '' }));
    button.appendChild(el('span', `bin-call-source ${sample.source === 'error' ? 'bad' : ''}`, sample.source ?? ''));
    button.appendChild(el('span', 'num bin-call-duration', fmt.duration(sample.duration)));
    button.appendChild(el('span', 'mono muted bin-call-trace', (sample.trace ?? '').slice(0, 12)));
    button.addEventListener('click', () => { if (sample.trace) onSelect(sample.trace); });
    li.appendChild(button);
    list.appendChild(li);
  }
  if (sorted.length > BIN_ROWS) list.appendChild(el('li', 'muted', `and ${fmt.count(sorted.length - BIN_ROWS)} more`));
}

