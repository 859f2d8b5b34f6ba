'use strict';
// Buildsets from the database, newest first; filters and sort order in
// the query string as on the builds page.

const PAGE_SIZE = 50;
const FILTERS = ['project', 'pipeline', 'change', 'branch', 'ref', 'result', 'uuid'];
const COLUMNS = [['Project', 'project'], ['Branch', null], ['Pipeline', 'pipeline'],
  ['Change', 'change'], ['Duration', 'duration'], ['Start', 'first_build_start_time'],
  ['Result', 'result']];

function row(s) {
  const base = `/t/${encodeURIComponent(zuul.tenant)}/buildset/`;
  const change = s.change ? `${s.change},${s.patchset}` : (s.ref || '');
  return zuul.el('tr', {class: 'buildset', 'data-uuid': s.uuid},
    zuul.el('td', {}, zuul.el('a', {href: base + s.uuid}, s.project)),
    zuul.el('td', {}, s.branch || ''), zuul.el('td', {}, s.pipeline), zuul.el('td', {}, change),
    zuul.el('td', {class: 'duration'}, s.duration === null ? '' : zuul.duration(s.duration * 1000)),
    zuul.el('td', {}, s.first_build_start_time || ''),
    zuul.el('td', {class: `result result-${(s.result || '').toLowerCase()}`}, s.result || ''));
}

function header(params) {
  const current = params.get('sort') || '';
  return zuul.el('tr', {}, COLUMNS.map(([title, key]) => {
    if (!key) return zuul.el('th', {scope: 'col'}, title);
    const next = new URLSearchParams(params);
    next.delete('skip');
    next.set('sort', current === `-${key}` ? key : `-${key}`);
    const state = current === key ? 'ascending' : current === `-${key}` ? 'descending' : 'none';
    return zuul.el('th', {scope: 'col', 'aria-sort': state, 'data-sort': key},
      zuul.el('a', {href: `?${next}`, class: 'sort'}, title));
  }));
}

function form(params) {
  return zuul.el('form', {class: 'filters', method: 'get', role: 'search'},
    FILTERS.map((name) => zuul.el('label', {class: 'filter'}, `${name} `,
      zuul.el('input', {name, value: params.get(name) || '', size: 12, id: `filter-${name}`}))),
    zuul.el('button', {type: 'submit'}, 'Filter'),
    zuul.el('a', {href: location.pathname}, 'Clear'));
}

async function load() {
  const params = new URLSearchParams(location.search);
  const query = new URLSearchParams(params);
  query.set('limit', PAGE_SIZE);
  const skip = parseInt(params.get('skip') || '0', 10);
  try {
    const sets = await zuul.getJSON(zuul.api(`buildsets?${query}`));
    const pager = zuul.el('p', {class: 'pager'});
    if (sets.length === PAGE_SIZE) {
      const next = new URLSearchParams(params);
      next.set('skip', skip + PAGE_SIZE);
      pager.append(zuul.el('a', {href: `?${next}`}, 'next →'));
    }
    zuul.show(zuul.el('h1', {}, 'Buildsets'), form(params),
      zuul.el('table', {class: 'buildsets', id: 'buildsets'},
        zuul.el('thead', {}, header(params)), zuul.el('tbody', {}, sets.map(row))),
      sets.length ? null : zuul.el('p', {class: 'empty'}, 'No buildsets found.'), pager);
    document.body.dataset.loaded = 'yes';
  } catch (e) {
    zuul.show(zuul.el('h1', {}, 'Buildsets'), form(params),
      zuul.error(`Cannot load buildsets: ${e.message}`));
  }
}

load();
