'use strict';
// One build from the history, in three views (?tab=summary|logs|console):
// Summary (result, timing, change, the nodeset it ran on, inputs,
// artifacts, reruns), Logs (its logs browsable in place: ?path=<file or
// dir> below the build's log directory; #L12 or #L12-20 highlights lines
// of a text log) and Console (job-output.json: each playbook and play,
// each task per host with its result, start and duration, and its output
// -- folded for tasks that passed, open for the one that failed).

const VERSION = new URL(document.currentScript.src).searchParams.get('v') || '';
const logview = import(`/static/logview.js?v=${VERSION}`);
const LOGS = `/logs/${encodeURIComponent(zuul.arg)}/`;
const TEXT_RE = /\.(txt|log|out|err|yaml|yml|conf|cfg|ini|sh|py|csv)$|^[^.]+$/i;

const TABS = [['summary', 'Summary'], ['logs', 'Logs'], ['console', 'Console']];

function currentTab() {
  const params = new URLSearchParams(location.search);
  const tab = params.get('tab');
  if (TABS.some(([key]) => key === tab)) return tab;
  return params.get('path') ? 'logs' : 'summary';
}

function tabs(current) {
  return zuul.el('nav', {class: 'build-tabs', 'aria-label': 'Build views'},
    TABS.map(([key, title]) => zuul.el('a', {href: `${location.pathname}?tab=${key}`,
      id: `tab-${key}`, 'aria-current': key === current ? 'page' : null}, title)));
}

function pagePath(path) {
  const params = new URLSearchParams(location.search);
  params.set('tab', 'logs');
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
    ['Nodeset', nodesetText(b)],
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

function nodesetText(b) {
  const nodes = (b.nodes || []).map((n) => {
    const names = Array.isArray(n.name) ? n.name.join(', ') : String(n.name || '');
    const where = [n.label, n.provider].filter((v) => v).join(' on ');
    return where ? `${names} (${where})` : names;
  });
  if (!b.nodeset && !nodes.length) return null;
  if (!nodes.length) return b.nodeset;
  return `${b.nodeset ? `${b.nodeset}: ` : ''}${nodes.join('; ')}`;
}

function reruns(b) {
  if (!(b.reruns || []).length) return null;
  const base = `/t/${encodeURIComponent(zuul.tenant)}/build/`;
  return [zuul.el('h2', {}, 'Other attempts of this job in the buildset'),
    zuul.el('ul', {class: 'reruns', id: 'reruns'}, b.reruns.map((r) =>
      zuul.el('li', {}, zuul.el('a', {href: base + r.uuid}, r.uuid), ` ${r.result || ''}`,
        r.final ? ' (final)' : '')))];
}

// Artifacts a playbook returned (zuul_return); only web addresses (or
// paths on this server) become links, never a javascript: URL.
function artifacts(b) {
  if (!(b.artifacts || []).length) return null;
  return [zuul.el('h2', {}, 'Artifacts'), zuul.el('ul', {class: 'artifacts', id: 'artifacts'},
    b.artifacts.map((a) => zuul.el('li', {}, /^(https?:\/\/|\/(?!\/))/i.test(a.url || '')
      ? zuul.el('a', {href: a.url}, a.name) : `${a.name} (${a.url})`)))];
}

// The command that runs this build again on one's own machine (zuul
// reproduce, doc: "Reproduce a build locally"). Text only (zuul.el makes
// text nodes), every word shell-quoted: a tenant name is never code.
function shellWord(word) {
  const text = String(word);
  return /^[A-Za-z0-9._\/:@=+-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`;
}

function reproduceCommand(b) {
  if (!/^[0-9a-fA-F-]{8,64}$/.test(b.uuid || '')) return null;
  const words = ['zuul', '--zuul-url', location.origin, 'reproduce', '--tenant', zuul.tenant,
    b.uuid];
  return words.map(shellWord).join(' ');
}

function reproduce(b) {
  const command = reproduceCommand(b);
  if (!command) return null;
  const copy = zuul.el('button', {type: 'button', id: 'reproduce-copy'}, 'Copy');
  copy.addEventListener('click', () => {
    if (navigator.clipboard) navigator.clipboard.writeText(command);
  });
  return [zuul.el('h2', {}, 'Reproduce it locally'),
    zuul.el('p', {}, 'Runs the same playbooks on the same speculative state, on a local ' +
      'node (secrets are not handed out: supply your own with --secret NAME=FILE):'),
    zuul.el('pre', {id: 'reproduce-command', class: 'reproduce-command'}, command), copy];
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

// -- the console (job-output.json) ----------------------------------------------

// "2024-01-02 03:04:05.123456" (the executor's local time) as a Date
function parseStamp(text) {
  const m = /^(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(\.\d+)?/.exec(text || '');
  if (!m) return null;
  const date = new Date(`${m[1]}T${m[2]}${m[3] ? m[3].slice(0, 4) : ''}`);
  return Number.isNaN(date.getTime()) ? null : date;
}

function taskFailed(status) {
  return /^(FAILED|UNREACHABLE)$/.test(status);
}

function statusClass(status) {
  return `status-${status.split(' ')[0].toLowerCase()}`;
}

// The task's output on one host: the lines streamed from the node (each
// with the time the node printed it), else what the result carries.
function taskOutput(result) {
  const pre = zuul.el('pre', {class: 'task-output'});
  const lines = Array.isArray(result.console) ? result.console : null;
  if (lines && lines.length) {
    for (const [stamp, text] of lines) {
      pre.append(zuul.el('span', {class: 'ts'}, `${String(stamp).slice(11, 23)} `),
        `${text}\n`);
    }
  } else {
    const parts = [];
    const add = (r) => ['stdout', 'stderr'].forEach((k) => { if (r[k]) parts.push(String(r[k])); });
    add(result);
    for (const item of Array.isArray(result.results) ? result.results : []) {
      if (item && typeof item === 'object') add(item);
    }
    if (parts.length) pre.append(parts.join('\n'), '\n');
  }
  if (result.msg && (taskFailed(String(result.status || '')) || !pre.childNodes.length)) {
    pre.append(zuul.el('strong', {}, String(result.msg)), '\n');
  }
  return pre.childNodes.length ? pre : zuul.el('p', {class: 'empty'}, 'No output.');
}

function taskRow(task, host, result, counter) {
  const status = String(result.status || (result.failed ? 'FAILED' : 'ok'));
  const info = task.task || {};
  const duration = info.duration || {};
  const start = parseStamp(duration.start || info.start);
  const end = parseStamp(duration.end);
  const failed = taskFailed(status);
  counter.n += 1;
  const details = zuul.el('details', {class: 'console-task', id: `task-${counter.n}`,
    'data-status': status, 'data-failed': failed ? 'true' : 'false',
    'data-task': info.name || '', 'data-host': host, open: failed ? 'open' : null},
  zuul.el('summary', {},
    zuul.el('span', {class: `task-status ${statusClass(status)}`}, status),
    zuul.el('span', {class: 'task-name'}, info.name || ''),
    zuul.el('span', {class: 'task-host'}, host),
    zuul.el('time', {class: 'task-start', datetime: start ? start.toISOString() : null},
      start ? start.toLocaleTimeString() : ''),
    zuul.el('span', {class: 'task-duration'},
      start && end ? zuul.duration(end - start) : '')),
  taskOutput(result));
  return details;
}

function consoleView(b, playbooks) {
  const counter = {n: 0};
  const sections = (Array.isArray(playbooks) ? playbooks : []).map((playbook) => {
    const plays = (playbook.plays || []).map((play) => {
      const rows = [];
      for (const task of play.tasks || []) {
        for (const [host, result] of Object.entries(task.hosts || {})) {
          rows.push(taskRow(task, host, result || {}, counter));
        }
      }
      return zuul.el('section', {class: 'console-play'},
        zuul.el('h3', {}, `PLAY [${(play.play || {}).name || ''}]`), rows);
    });
    const phase = (playbook.phase || '').replace('_', '-');
    return zuul.el('section', {class: 'console-playbook', 'data-phase': playbook.phase || ''},
      zuul.el('h2', {}, `${phase} ${playbook.playbook || ''}`), plays);
  });
  return [artifacts(b), zuul.el('div', {class: 'console', id: 'console'},
    sections.length ? sections : zuul.el('p', {class: 'empty'}, 'No playbook ran.'))];
}

async function consoleSection(b) {
  const playbooks = await fetchJSON(logsUrl('job-output.json'));
  if (playbooks === null) {
    return [zuul.el('p', {class: 'empty', id: 'no-console'},
      'No console: this build kept no job-output.json with its logs.'), artifacts(b)];
  }
  return consoleView(b, playbooks);
}

async function load() {
  try {
    const b = await zuul.getJSON(zuul.api(`build/${encodeURIComponent(zuul.arg)}`));
    const tab = currentTab();
    let body;
    if (tab === 'logs') body = await logs(b);
    else if (tab === 'console') body = await consoleSection(b);
    else body = [summary(b), reproduce(b), reruns(b), artifacts(b), await inputs(b)];
    zuul.show(zuul.el('h1', {}, `Build ${b.uuid}`),
      zuul.el('p', {class: `build-result result-${(b.result || '').toLowerCase()}`},
        `${b.job_name}: ${b.result || 'running'}`), tabs(tab), [body].flat(4));
    const text = document.getElementById('log-text');
    if (text) {
      const {highlight} = await logview;
      highlight(text, location.hash);
      window.addEventListener('hashchange', () => highlight(text, location.hash));
    }
    const failed = document.querySelector('details.console-task[data-failed="true"]');
    if (failed) failed.scrollIntoView({block: 'center'});
    document.body.dataset.loaded = 'yes';
  } catch (e) {
    zuul.show(zuul.error(`Cannot load the build: ${e.message}`));
  }
}

load();
