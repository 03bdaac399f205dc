// "Reproduce as scenario" in the call detail: GET /api/calls/{trace}/scenario (with ?session=1,
// every call of its session that overlapped it), saved as a file `flowscope run` plays; a call the
// server cannot reproduce says why, in the detail.

/** Wires the two buttons of the call detail `panel` (its open call is `panel.dataset.trace`). */
export function wireReproduce(panel) {
  const status = panel.querySelector('.reproduce-status');
  for (const button of panel.querySelectorAll('[data-reproduce]')) {
    button.addEventListener('click', async () => {
      const trace = panel.dataset.trace;
      if (!trace) return;
      const session = button.dataset.reproduce === 'session';
      status.textContent = 'Asking the server for the scenario…';
      try {
        const response = await fetch(`api/calls/${encodeURIComponent(trace)}/scenario${session ? '?session=1' : ''}`, { cache: 'no-store' });
        const text = await response.text();
        if (!response.ok) {
          let message = '';
          try { message = JSON.parse(text)?.error?.message ?? ''; } catch { /* not JSON */ }
          status.textContent = `Not reproducible (HTTP ${response.status}): ${message || text.slice(0, 200)}`;
          status.title = status.textContent;
          return;
        }
        const name = `reproduce-${trace.slice(0, 8)}${session ? '-session' : ''}.json5`;
        const link = document.createElement('a');
        link.href = URL.createObjectURL(new Blob([text], { type: 'application/json5' }));
        link.download = name;
        link.click();
        setTimeout(() => URL.revokeObjectURL(link.href), 10000);
        status.textContent = `Saved ${name}: flowscope run ${name}`;
        status.title = status.textContent;
      } catch (error) {
        status.textContent = `Could not reach the server: ${error.message}`;
      }
    });
  }
}

/** Clears what the buttons said about an earlier call. */
export function resetReproduce(panel) {
  const status = panel.querySelector('.reproduce-status');
  if (status) { status.textContent = ''; status.title = ''; }
}
