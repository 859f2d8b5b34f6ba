'use strict';
// One buildset: its change, result, message and every build (retried
// attempts included) with links to their pages.

async function load() {
  const base = `/t/${encodeURIComponent(zuul.tenant)}`;
  try {
    const s = await zuul.getJSON(zuul.api(`buildset/${encodeURIComponent(zuul.arg)}`));
    const change = s.change ? `${s.change},${s.patchset}` : s.ref;
    const rows = [['Result', s.result], ['Project', s.project], ['Branch', s.branch],
      ['Pipeline', s.pipeline],
      ['Change', change && s.ref_url ? zuul.el('a', {href: s.ref_url}, change) : change],
      ['Duration', s.duration === null ? '' : zuul.duration(s.duration * 1000)],
      ['Message', s.message], ['Event', s.event_id]];
    const table = zuul.el('table', {class: 'build-detail', id: 'buildset'},
      rows.filter(([, v]) => v !== null && v !== undefined && v !== '').map(([k, v]) =>
        zuul.el('tr', {}, zuul.el('th', {scope: 'row'}, k),
          zuul.el('td', {class: `field-${k.toLowerCase()}`}, v instanceof Node ? v : String(v)))));
    const builds = zuul.el('table', {class: 'builds', id: 'buildset-builds'},
      zuul.el('thead', {}, zuul.el('tr', {}, ['Job', 'Duration', 'Voting', 'Result'].map((h) =>
        zuul.el('th', {scope: 'col'}, h)))),
      zuul.el('tbody', {}, s.builds.map((b) => zuul.el('tr', {class: 'build',
        'data-uuid': b.uuid}, zuul.el('td', {}, zuul.el('a', {href: `${base}/build/${b.uuid}`},
        b.job_name), b.final === false ? ' (retried)' : ''),
      zuul.el('td', {}, b.duration === null ? '' : zuul.duration(b.duration * 1000)),
      zuul.el('td', {}, b.voting ? 'yes' : 'no'),
      zuul.el('td', {class: `result result-${(b.result || '').toLowerCase()}`}, b.result || '')))));
    zuul.show(zuul.el('h1', {}, `Buildset ${s.uuid}`), table, zuul.el('h2', {}, 'Builds'), builds);
    document.body.dataset.loaded = 'yes';
  } catch (e) {
    zuul.show(zuul.error(`Cannot load the buildset: ${e.message}`));
  }
}

load();
