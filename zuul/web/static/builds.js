'use strict';
// Build history from the database. Filters and sort order live in the
// page's query string (the API's parameters: project, pipeline, job_name,
// change, branch, result, voting, ...; sort=end_time or sort=-end_time),
// so a filtered, sorted list is a link to share.

const PAGE_SIZE = 50;
const FILTERS = ['project', 'pipeline', 'job_name', 'change', 'patchset', 'branch', 'ref',
  'result', 'voting', 'held', 'uuid'];
// column title -> the API's sort key (null: not sortable)
const COLUMNS = [['Job', 'job_name'], ['Project', 'project'], ['Branch', null],
  ['Pipeline', 'pipeline'], ['Change', 'change'], ['Duration', 'duration'],
  ['Start', 'start_time'], ['Result', 'result'], ['Logs', null]];

// Each build's logs: the build page's Logs view (which browses logs kept
// by zuul-web, or links where a job uploaded them); nothing without logs.
function logsCell(b) {
  if (!b.log_url || !/^(https?:\/\/|\/)/i.test(b.log_url)) return zuul.el('td', {});
  return zuul.el('td', {class: 'log-link'}, zuul.el('a', {class: 'logs-link',
    'aria-label': `logs of ${b.job_name} ${b.uuid}`,
    href: `/t/${encodeURIComponent(zuul.tenant)}/build/${b.uuid}?tab=logs`}, 'Logs'));
}

function buildRow(b) {
  const link = zuul.el('a', {href: `/t/${encodeURIComponent(zuul.tenant)}/build/${b.uuid}`},
    b.job_name);
  const change = b.change ? `${b.change},${b.patchset}` : (b.ref || '');
  return zuul.el('tr', {class: 'build', 'data-uuid': b.uuid},
    zuul.el('td', {}, link), zuul.el('td', {}, b.project), zuul.el('td', {}, b.branch || ''),
    zuul.el('td', {}, b.pipeline), zuul.el('td', {}, change),
    zuul.el('td', {class: 'duration'}, b.duration === null ? '' : zuul.duration(b.duration * 1000)),
    zuul.el('td', {}, b.start_time || ''),
    zuul.el('td', {class: `result result-${(b.result || '').toLowerCase()}`}, b.result || ''),
    logsCell(b));
}

// The filter form: a GET form, so submitting it rewrites the query string.
function filterForm(params, fields) {
  const inputs = fields.map((name) => zuul.el('label', {class: 'filter'}, `${name} `,
    zuul.el('input', {name, value: params.get(name) || '', size: 12,
      id: `filter-${name}`})));
  const sort = params.get('sort');
  return zuul.el('form', {class: 'filters', method: 'get', role: 'search'}, inputs,
    sort ? zuul.el('input', {type: 'hidden', name: 'sort', value: sort}) : null,
    zuul.el('button', {type: 'submit'}, 'Filter'),
    zuul.el('a', {href: location.pathname}, 'Clear'));
}

// Header cells: a sortable column links to the same query sorted by it
// (descending first; again for ascending), aria-sort tells which is on.
function sortHeader(params, columns) {
  const current = params.get('sort') || '';
  return zuul.el('tr', {}, columns.map(([title, key]) => {
    if (!key) return zuul.el('th', {scope: 'col'}, title);
    const next = new URLSearchParams(params);
    next.delete('skip');
    next.set('sort', current === `-${key}` ? key : `-${key}`);
    const state = current === key ? 'ascending' : current === `-${key}` ? 'descending' : 'none';
    const arrow = state === 'ascending' ? ' ▲' : state === 'descending' ? ' ▼' : '';
    return zuul.el('th', {scope: 'col', 'aria-sort': state, 'data-sort': key},
      zuul.el('a', {href: `?${next}`, class: 'sort'}, title + arrow));
  }));
}

function pager(params, count) {
  const skip = parseInt(params.get('skip') || '0', 10);
  const p = zuul.el('p', {class: 'pager'});
  const link = (value, text) => {
    const next = new URLSearchParams(params);
    next.set('skip', value);
    return zuul.el('a', {href: `?${next}`}, text);
  };
  if (skip > 0) p.append(link(Math.max(0, skip - PAGE_SIZE), '← previous'), ' ');
  if (count === PAGE_SIZE) p.append(link(skip + PAGE_SIZE, 'next →'));
  return p;
}

async function load() {
  const params = new URLSearchParams(location.search);
  const query = new URLSearchParams(params);
  query.set('limit', PAGE_SIZE);
  try {
    const builds = await zuul.getJSON(zuul.api(`builds?${query}`));
    zuul.show(zuul.el('h1', {}, 'Builds'), filterForm(params, FILTERS),
      zuul.el('table', {class: 'builds', id: 'builds'},
        zuul.el('thead', {}, sortHeader(params, COLUMNS)),
        zuul.el('tbody', {}, builds.map(buildRow))),
      builds.length ? null : zuul.el('p', {class: 'empty'}, 'No builds found.'),
      pager(params, builds.length));
    document.body.dataset.loaded = 'yes';
  } catch (e) {
    zuul.show(zuul.el('h1', {}, 'Builds'), filterForm(params, FILTERS),
      zuul.error(`Cannot load builds: ${e.message}`));
  }
}

load();
