'use strict';
// One build from the history: result, timing, change, logs, artifacts.

async function load() {
  try {
    const b = await zuul.getJSON(zuul.api(`build/${encodeURIComponent(zuul.arg)}`));
    const rows = [
      ['Result', b.result], ['Job', b.job_name], ['Project', b.project],
      ['Branch', b.branch], ['Pipeline', b.pipeline],
      ['Change', b.change ? `${b.change},${b.patchset}` : b.ref],
      ['Start', b.start_time], ['End', b.end_time],
      ['Duration', b.duration === null ? '' : zuul.duration(b.duration * 1000)],
      ['Voting', b.voting ? 'yes' : 'no'], ['Buildset', b.buildset.uuid],
      ['Event', b.event_id], ['Error', b.error_detail],
    ];
    const table = zuul.el('table', {class: 'build-detail', id: 'build'},
      rows.filter(([, v]) => v !== null && v !== undefined && v !== '').map(([k, v]) =>
        zuul.el('tr', {}, zuul.el('th', {}, k), zuul.el('td', {class: `field-${k.toLowerCase()}`},
          String(v)))));
    const logs = b.log_url ? zuul.el('p', {}, zuul.el('a', {href: b.log_url}, 'Logs')) : null;
    const artifacts = (b.artifacts || []).map((a) =>
      zuul.el('li', {}, zuul.el('a', {href: a.url}, a.name)));
    zuul.show(zuul.el('h1', {}, `Build ${b.uuid}`), table, logs,
      artifacts.length ? zuul.el('h2', {}, 'Artifacts') : null,
      artifacts.length ? zuul.el('ul', {class: 'artifacts'}, artifacts) : null);
    document.body.dataset.loaded = 'yes';
  } catch (e) {
    zuul.show(zuul.error(`Cannot load the build: ${e.message}`));
  }
}

load();
