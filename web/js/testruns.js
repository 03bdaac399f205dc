// The test runs panel: the newest invocations (one `swift test` each) with their pass/fail counts;
// opening one lists its tests, failing first, with their first failure; picking a test opens its run.
import * as api from './api.js';
import * as fmt from './format.js';
import { el, clear } from './svg.js';

const INVOCATIONS = 10;
const TESTS_PER_PAGE = 50;
const STATUS_TEXT = { failed: 'failed', running: 'running', skipped: 'skipped', passed: 'passed' };

/**
 * The panel in `section`: `refresh()` reloads the invocations (redrawing only when they changed),
 * `onPick(runID)` is called when the user picks a test.
 */
export function createTestRuns(section, { onPick }) {
  const list = section.querySelector('.invocations');
  const note = section.querySelector('.panel-note');
  let shown = '';
  const open = new Set(); // invocation ids the user has open
  let first = true;

  async function refresh() {
    let answer;
    try {
      answer = await api.invocations(INVOCATIONS);
    } catch (error) {
      note.textContent = `Could not load the test runs: ${error.message}`;
      return;
    }
    const invocations = Array.isArray(answer.invocations) ? answer.invocations : [];
    section.hidden = invocations.length === 0;
    const text = JSON.stringify(invocations);
    if (text === shown) return;
    shown = text;
    if (first && invocations.length) {
      // The newest invocation starts open: its failures are the first thing to see.
      open.add(invocations[0].id);
      first = false;
    }
    note.textContent = answer.total > invocations.length
      ? `newest ${invocations.length} of ${fmt.count(answer.total)} invocations` : `${invocations.length} invocation${invocations.length === 1 ? '' : 's'}`;
    clear(list);
    for (const inv of invocations) list.appendChild(renderInvocation(inv));
  }

  function renderInvocation(inv) {
    const details = el('details', 'invocation', null, { 'data-invocation': inv.id });
    const summary = el('summary', 'invocation-summary');
    summary.appendChild(el('span', 'invocation-id clip', inv.id, { title: inv.id }));
    summary.appendChild(el('span', `count ${inv.failed ? 'count-failed' : ''}`, `${fmt.count(inv.failed)} failed`));
    summary.appendChild(el('span', 'count', `${fmt.count(inv.passed)} passed`));
    if (inv.skipped) summary.appendChild(el('span', 'count', `${fmt.count(inv.skipped)} skipped`));
    if (inv.running) summary.appendChild(el('span', 'count', `${fmt.count(inv.running)} running`));
    const where = [inv.host, inv.revision ? inv.revision.slice(0, 8) : null, inv.start ? fmt.ago(inv.start) : null].filter(Boolean).join(' · ');
    summary.appendChild(el('span', 'invocation-where clip', where, { title: where }));
    details.appendChild(summary);
    const tests = el('ol', 'tests');
    details.appendChild(tests);
    details.open = open.has(inv.id);
    if (details.open) loadTests(inv.id, tests, null);
    details.addEventListener('toggle', () => {
      if (details.open) { open.add(inv.id); loadTests(inv.id, tests, null); } else open.delete(inv.id);
    });
    return details;
  }

  async function loadTests(invocation, tests, cursor) {
    let answer;
    try {
      answer = await api.runs({ invocation, order: 'status', limit: TESTS_PER_PAGE, cursor });
    } catch (error) {
      if (!cursor) clear(tests);
      tests.appendChild(el('li', 'tests-error', `Could not load the tests: ${error.message}`));
      return;
    }
    if (!cursor) clear(tests);
    tests.querySelector('.more')?.remove();
    for (const run of answer.runs ?? []) tests.appendChild(renderTest(run));
    if (answer.next) {
      const more = el('li', 'more');
      const button = el('button', 'btn', `More tests (${fmt.count(answer.matched - tests.children.length)} left)`, { type: 'button' });
      button.addEventListener('click', () => loadTests(invocation, tests, answer.next));
      more.appendChild(button);
      tests.appendChild(more);
    }
  }

  function renderTest(run) {
    const item = el('li', 'test', null, { 'data-status': run.status ?? '', 'data-run': run.id });
    const button = el('button', 'test-pick', null, { type: 'button', title: `Open run ${run.id}` });
    button.appendChild(el('span', 'status-badge', STATUS_TEXT[run.status] ?? run.status ?? '', { 'data-status': run.status ?? '' }));
    button.appendChild(el('span', 'test-name clip', run.test ?? run.id, { title: run.test ?? run.id }));
    button.appendChild(el('span', 'test-duration', Number.isFinite(run.duration) ? fmt.duration(run.duration) : ''));
    const failure = (run.failures ?? [])[0];
    if (failure) button.appendChild(el('span', 'test-failure clip', failure, { title: (run.failures ?? []).join('\n') }));
    button.addEventListener('click', () => onPick(run.id));
    item.appendChild(button);
    return item;
  }

  return { refresh };
}
