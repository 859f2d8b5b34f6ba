'use strict';
// One build from the history: result, timing, change, inputs, artifacts,
// reruns, and its logs browsable in place (?path=<file or dir> below the
// build's log directory; #L12 or #L12-20 highlights lines of a text log).

const VERSION = new URL(document.currentScript.src).searchParams.get('v') || '';
const logview = import(`/static/logview.js?v=${VERSION}`);
const LOGS = `/logs/${encodeURIComponent(zuul.arg)}/`;
const TEXT_RE = /\.(txt|log|out|err|yaml|yml|conf|cfg|ini|sh|py|csv)$|^[^.]+$/i;

function pagePath(path) {
  const params = new URLSearchParams(location.search);
  if (path) params.set('path', path); else params.delete('path');
  const query = params.toString();
  return `${location.pathname}${query ? `?${query}` : ''}`;
}

function logsUrl(path) {
  return LOGS + path.split('/').map(encodeURIComponent).join('/');
}

function summary(b) {
  const tenantUrl = `/t/${encodeURIComponent(zuul.tenant)}`;
  const change = b.change ? `${b.change},${b.patchset}` : b.ref;
  const rows = [
    ['Result', b.result], ['Job', b.job_name], ['Project', b.project],
    ['Branch', b.branch], ['Pipeline', b.pipeline],
    ['Change', change && b.ref_url ? zuul.el('a', {href: b.ref_url}, change) : change],
    ['Start', b.start_time], ['End', b.end_time],
    ['Duration', b.duration === null ? '' : zuul.duration(b.duration * 1000)],
    ['Voting', b.voting ? 'yes' : 'no'], ['Final', b.final === false ? 'no (retried)' : null],
    ['Buildset', zuul.el('a', {href: `${tenantUrl}/buildset/${b.buildset.uuid}`,
      id: 'buildset-link'}, b.buildset.uuid)],
    ['Event', b.event_id], ['Error', b.error_detail],
    ['Failure class', b.failure_class],
    ['Reused from', b.reused_from ? zuul.el('a', {href: `${tenantUrl}/build/${b.reused_from}`,
      id: 'reused-from-link'}, b.reused_from) : null],
  ];
  return zuul.el('table', {class: 'build-detail', id: 'build'},
    rows.filter(([, v]) => v !== null && v !== undefined && v !== '').map(([k, v]) =>
      zuul.el('tr', {}, zuul.el('th', {scope: 'row'}, k),
        zuul.el('td', {class: `field-${k.toLowerCase()}`}, v instanceof Node ? v : String(v)))));
}

function reruns(b) {
  if (!(b.reruns || []).length) return null;
  const base = `/t/${encodeURIComponent(zuul.tenant)}/build/`;
  return [zuul.el('h2', {}, 'Other attempts of this job in the buildset'),
    zuul.el('ul', {class: 'reruns', id: 'reruns'}, b.reruns.map((r) =>
      zuul.el('li', {}, zuul.el('a', {href: base + r.uuid}, r.uuid), ` ${r.result || ''}`,
        r.final ? ' (final)' : '')))];
}

function artifacts(b) {
  if (!(b.artifacts || []).length) return null;
  return [zuul.el('h2', {}, 'Artifacts'), zuul.el('ul', {class: 'artifacts'},
    b.artifacts.map((a) => zuul.el('li', {}, zuul.el('a', {href: a.url}, a.name))))];
}

async function fetchJSON(url) {
  const response = await fetch(url, {cache: 'no-store'});
  if (!response.ok) return null;
  return response.json();
}

// Inputs: the inventory the job ran with (zuul-info/inventory.yaml of its
// logs, secrets redacted by the server), else what the build record has.
async function inputs(b) {
  const inventory = await fetchJSON(`${LOGS}zuul-info/inventory.yaml?format=json`);
  const section = [zuul.el('h2', {}, 'Inputs')];
  if (!inventory || !inventory.all) {
    section.push(zuul.el('p', {id: 'inputs-record'},
      `Nodeset: ${b.nodeset || 'not recorded'} (no zuul-info/inventory.yaml in the logs).`));
    return section;
  }
  const vars = Object.assign({}, inventory.all.vars || {});
  delete vars.zuul;
  const hosts = Object.entries(inventory.all.hosts || {}).map(([name, h]) =>
    zuul.el('li', {}, `${name}: ${((h || {}).nodepool || {}).label || ''}`));
  section.push(zuul.el('h3', {}, 'Nodeset'), zuul.el('ul', {id: 'inputs-hosts'}, hosts),
    zuul.el('h3', {}, 'Job variables'),
    zuul.el('pre', {id: 'inputs-vars'}, JSON.stringify(vars, null, 2)),
    zuul.el('details', {}, zuul.el('summary', {}, 'Inventory'),
      zuul.el('pre', {id: 'inputs-inventory'}, JSON.stringify(inventory, null, 2))));
  return section;
}

function breadcrumbs(path) {
  const parts = path ? path.split('/').filter(Boolean) : [];
  const crumbs = [zuul.el('a', {href: pagePath('')}, 'logs')];
  parts.forEach((part, i) => {
    crumbs.push(' / ', zuul.el('a', {href: pagePath(parts.slice(0, i + 1).join('/'))}, part));
  });
  return zuul.el('nav', {class: 'log-path', 'aria-label': 'Log path'}, crumbs,
    ' ', zuul.el('a', {href: logsUrl(path)}, '(raw)'));
}

async function directory(path, entries) {
  const prefix = path ? `${path.replace(/\/$/, '')}/` : '';
  const rows = entries.map((e) => zuul.el('tr', {class: 'log-entry'},
    zuul.el('td', {}, zuul.el('a', {href: pagePath(prefix + e.name)},
      e.type === 'dir' ? `${e.name}/` : e.name)),
    zuul.el('td', {}, e.size === null ? '' : String(e.size))));
  return zuul.el('table', {class: 'log-tree', id: 'log-tree'},
    zuul.el('thead', {}, zuul.el('tr', {}, zuul.el('th', {}, 'Name'), zuul.el('th', {}, 'Size'))),
    zuul.el('tbody', {}, rows));
}

async function textFile(path) {
  const response = await fetch(logsUrl(path), {cache: 'no-store'});
  if (!response.ok) return zuul.error(`Cannot load ${path}: ${response.status}`);
  const pre = zuul.el('pre', {class: 'log-text', id: 'log-text'});
  const {lineRenderer} = await logview;
  lineRenderer(pre)(await response.text(), true);
  return pre;
}

async function taskList(path) {
  const data = await fetchJSON(logsUrl(path));
  if (data === null) return zuul.error(`Cannot load ${path}`);
  const {taskRows} = await logview;
  const rows = taskRows(data);
  const head = ['Playbook', 'Play', 'Task', 'Host', 'Result'];
  return zuul.el('table', {class: 'task-list', id: 'task-list'},
    zuul.el('thead', {}, zuul.el('tr', {}, head.map((h) => zuul.el('th', {}, h)))),
    zuul.el('tbody', {}, rows.map((r) => zuul.el('tr', {class: 'task',
      'data-result': r.result}, zuul.el('td', {}, `${r.phase} ${r.playbook}`),
    zuul.el('td', {}, r.play), zuul.el('td', {}, r.task), zuul.el('td', {}, r.host),
    zuul.el('td', {class: `result result-${r.result.toLowerCase()}`, title: r.msg},
      r.result)))));
}

async function logs(b) {
  const path = (new URLSearchParams(location.search).get('path') || '').replace(/^\/+/, '');
  const listing = await fetchJSON(`${logsUrl(path)}${path && !path.endsWith('/') ? '/' : ''}` +
    '?format=listing');
  const section = [zuul.el('h2', {id: 'logs'}, 'Logs')];
  if (listing === null && !path) {
    section.push(b.log_url ? zuul.el('p', {}, zuul.el('a', {href: b.log_url}, 'Logs')) :
      zuul.el('p', {}, 'No logs kept.'));
    return section;
  }
  section.push(breadcrumbs(path));
  if (listing !== null) section.push(await directory(path, listing));
  else if (/(^|\/)job-output\.json$/.test(path)) section.push(await taskList(path));
  else if (TEXT_RE.test(path.split('/').pop())) section.push(await textFile(path));
  else section.push(zuul.el('p', {}, zuul.el('a', {href: logsUrl(path)}, `Open ${path}`)));
  return section;
}

async function load() {
  try {
    const b = await zuul.getJSON(zuul.api(`build/${encodeURIComponent(zuul.arg)}`));
    const [inputSection, logSection] = await Promise.all([inputs(b), logs(b)]);
    zuul.show(zuul.el('h1', {}, `Build ${b.uuid}`), summary(b), reruns(b), artifacts(b),
      inputSection, logSection);
    const text = document.getElementById('log-text');
    if (text) {
      const {highlight} = await logview;
      highlight(text, location.hash);
      window.addEventListener('hashchange', () => highlight(text, location.hash));
    }
    document.body.dataset.loaded = 'yes';
  } catch (e) {
    zuul.show(zuul.error(`Cannot load the build: ${e.message}`));
  }
}

load();
