// Panels that hold still ('waterfall', 'histogram', 'tail'): while the pointer is on them, or the
// keyboard focus is in them, they are not redrawn, so the row a user aims at stays where it is.

/** The panels the pointer is on. */
export const pointerOn = new Set();
/** The panels the keyboard focus is in. */
export const focusOn = new Set();

/** Whether a panel holds still: the pointer is on it, or the keyboard focus is in it. */
export function held(key) {
  return pointerOn.has(key) || focusOn.has(key);
}

/** The note a held panel shows: what holds it. */
export function heldNote(key) {
  if (focusOn.has(key)) return '· held while it has the keyboard focus';
  return '· held while the pointer is on it';
}

/**
 * Holds panel `key` (its element `node`, its note `note`) under the pointer and the keyboard's focus (a
 * click's focus does not hold it: the pointer is there); `release()` is called when neither holds it any more.
 */
export function wire(key, node, note, release) {
  node.addEventListener('pointerenter', () => { pointerOn.add(key); });
  node.addEventListener('pointerleave', () => { pointerOn.delete(key); release(); });
  node.addEventListener('focusin', (event) => {
    if (!event.target.matches?.(':focus-visible')) return;
    focusOn.add(key);
    note.hidden = false;
    note.textContent = heldNote(key);
  });
  node.addEventListener('focusout', (event) => {
    if (event.relatedTarget && node.contains(event.relatedTarget)) return;
    // A row replaced by a forced redraw loses the focus for a moment: it is given back at once.
    queueMicrotask(() => {
      if (node.contains(document.activeElement)) return;
      focusOn.delete(key);
      release();
    });
  });
}
