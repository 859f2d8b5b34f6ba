'use strict';
// Build history from the database, newest first; filters come from the
// page's query string (project, pipeline, job_name, change, result).

const PAGE_SIZE = 50;

function buildRow(b) {
  const link = zuul.el('a', {href: `/t/${encodeURIComponent(zuul.tenant)}/build/${b.uuid}`},
    b.job_name);
  const change = b.change ? `${b.change},${b.patchset}` : (b.ref || '');
  return zuul.el('tr', {class: 'build', 'data-uuid': b.uuid},
    zuul.el('td', {}, link), zuul.el('td', {}, b.project), zuul.el('td', {}, b.branch || ''),
    zuul.el('td', {}, b.pipeline), zuul.el('td', {}, change),
    zuul.el('td', {}, b.duration === null ? '' : zuul.duration(b.duration * 1000)),
    zuul.el('td', {}, b.start_time || ''),
    zuul.el('td', {class: `result result-${(b.result || '').toLowerCase()}`}, b.result || ''));
}

async function load() {
  const params = new URLSearchParams(location.search);
  const skip = parseInt(params.get('skip') || '0', 10);
  params.set('limit', PAGE_SIZE);
  try {
    const builds = await zuul.getJSON(zuul.api(`builds?${params}`));
    const head = ['Job', 'Project', 'Branch', 'Pipeline', 'Change', 'Duration', 'Start', 'Result'];
    const pager = zuul.el('p', {class: 'pager'});
    if (skip > 0) {
      params.set('skip', Math.max(0, skip - PAGE_SIZE));
      pager.append(zuul.el('a', {href: `?${params}`}, '← newer'), ' ');
    }
    if (builds.length === PAGE_SIZE) {
      params.set('skip', skip + PAGE_SIZE);
      pager.append(zuul.el('a', {href: `?${params}`}, 'older →'));
    }
    zuul.show(zuul.el('h1', {}, 'Builds'),
      zuul.el('table', {class: 'builds', id: 'builds'},
        zuul.el('thead', {}, zuul.el('tr', {}, head.map((h) => zuul.el('th', {}, h)))),
        zuul.el('tbody', {}, builds.map(buildRow))),
      builds.length ? null : zuul.el('p', {class: 'empty'}, 'No builds found.'), pager);
    document.body.dataset.loaded = 'yes';
  } catch (e) {
    zuul.show(zuul.error(`Cannot load builds: ${e.message}`));
  }
}

load();
