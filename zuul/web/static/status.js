'use strict';
// The status page: pipelines, their shared queues drawn as queues (a line
// joins each change to the one it is tested behind), each change with its
// position, time queued, ETA and each job's progress bar from its expected
// duration; each change's jobs fold away (its toggle, or "Collapse all").
// Counts are of the changes under test: an item that is only there as a
// dependency of another (not live) is drawn but not counted.  Polls the
// status API every few seconds while the tab is visible.
// /t/<t>/status/change/<N,P> shows one change.  Logged-in admins
// (login.js) get Dequeue and Promote buttons and an Enqueue form.

const REFRESH_MS = 5000;
const CHANGE_ID_RE = /^\d+,\d+$/;          // a Gerrit change: its own status page
const CHANGE_RE = /^\d+,[0-9a-fA-F]+$/;      // and a GitHub pull request (N,sha)
// collapsed: the keys (pipeline:item) of changes whose jobs are folded;
// collapseNew: fold the changes that appear from now on too.
const state = {status: null, items: null, timer: null, collapsed: new Set(),
  collapseNew: false, seen: new Set()};
// One formatter for every enqueue time (toLocaleString makes one per call).
const DATE_FORMAT = new Intl.DateTimeFormat(undefined, {dateStyle: 'medium',
                                                       timeStyle: 'medium'});

function jobState(job) {
  if (job.result) return job.result;
  if (job.start_time) return 'running';
  return job.waiting_status ? `waiting (${job.waiting_status})` : 'queued';
}

// A running job's bar is its elapsed time over its estimate (the mean of
// its recent successful builds); without an estimate (its first runs) the
// bar is full and striped, as released Zuul draws it.
function progressBar(job) {
  let percent = 0;
  let cls = '';
  if (job.result) percent = 100;
  else if (job.start_time && job.estimated_time) {
    percent = Math.max(1, Math.min(99,
      Math.floor(100 * (job.elapsed_time / 1000) / job.estimated_time)));
  } else if (job.start_time) {
    percent = 100;
    cls = ' bar-indeterminate';
  }
  const state = job.result ? job.result.toLowerCase() : (job.start_time ? 'running' : 'queued');
  const title = cls ? 'no estimate yet' : `${percent}%`;
  // an indeterminate bar has no value (WAI-ARIA progressbar)
  return zuul.el('div', {class: 'progress', title, role: 'progressbar',
                         'aria-label': `${job.name} progress`, 'aria-valuemin': '0',
                         'aria-valuemax': '100', 'aria-valuenow': cls ? null : String(percent),
                         'aria-valuetext': cls ? 'running, no estimate yet' : null},
    zuul.el('div', {class: `progress-bar bar-${state}${cls}`, style: `width: ${percent}%`,
                    'data-percent': percent}));
}

// "~3 min": an item's expected time to finish, from its jobs' estimates.
function eta(ms) {
  const minutes = Math.max(1, Math.ceil(ms / 60000));
  if (minutes < 60) return `~${minutes} min`;
  return `~${Math.floor(minutes / 60)} hr ${minutes % 60} min`;
}

function jobRow(job) {
  let link = job.name;
  if (job.result && job.uuid) {
    link = zuul.el('a', {href: `/t/${encodeURIComponent(zuul.tenant)}/build/${job.uuid}`},
      job.name);
  } else if (job.uuid && job.url) {
    // the live log page (stream.js) follows the console over a websocket
    link = zuul.el('a', {class: 'live-log', 'aria-label': `live log of ${job.name}`,
      href: `/t/${encodeURIComponent(zuul.tenant)}/stream/${encodeURIComponent(job.uuid)}`},
      job.name);
  }
  const state = jobState(job);
  const cls = state.split(' ')[0].toLowerCase();
  const remaining = job.remaining_time ? ` ${zuul.duration(job.remaining_time)} left` : '';
  return zuul.el('li', {class: `job job-${cls}`, 'data-job': job.name},
    zuul.el('span', {class: 'job-name'}, link, job.voting === false ? ' (non-voting)' : ''),
    progressBar(job),
    zuul.el('span', {class: `job-state state-${cls}`}, state + remaining));
}

// What the item's badge says: released Zuul's icons, in words.
function itemHealth(item) {
  const reasons = item.failing_reasons || [];
  const own = reasons.filter((r) => r !== 'a needed change is failing');
  if (own.length) return ['failing', 'Failing'];
  if (reasons.length) return ['behind-failing', 'Behind a failing change'];
  if (!item.live) return ['non-live', 'Needed by the change behind'];
  if (!item.active) return ['waiting', 'Waiting'];
  return ['succeeding', 'Succeeding'];
}

// Only web addresses become links (never a javascript: URL).
function changeLink(item) {
  if (!item.url || !/^https?:\/\//i.test(item.url)) return item.id;
  return zuul.el('a', {href: item.url, class: 'review-link',
                       title: 'the change in its code review'}, item.id);
}

function statusLink(item) {
  if (!CHANGE_ID_RE.test(item.id) || zuul.arg) return null;
  return zuul.el('a', {class: 'change-status-link', 'aria-label': `status of ${item.id} only`,
    href: `/t/${encodeURIComponent(zuul.tenant)}/status/change/${item.id}`}, 'status');
}

function itemKey(item, pipeline) {
  return `${pipeline ? pipeline.name : item.pipeline || ''}:${item.id}`;
}

function isCollapsed(key) {
  if (!state.seen.has(key)) {
    state.seen.add(key);
    if (state.collapseNew) state.collapsed.add(key);
  }
  return state.collapsed.has(key);
}

// The button that folds a change's jobs away (and back).
function toggleButton(item, key, collapsed, listId) {
  const button = zuul.el('button', {type: 'button', class: 'toggle-jobs',
    'aria-expanded': collapsed ? 'false' : 'true', 'aria-controls': listId,
    'data-focus-key': `toggle:${key}`,
    'aria-label': `${collapsed ? 'Show' : 'Hide'} the jobs of ${item.id}`},
  collapsed ? '\u25b8' : '\u25be');
  button.addEventListener('click', () => {
    if (state.collapsed.has(key)) state.collapsed.delete(key);
    else state.collapsed.add(key);
    render();
  });
  return button;
}

function jobSummary(item) {
  const jobs = item.jobs || [];
  const done = jobs.filter((j) => j.result).length;
  const failed = jobs.filter((j) => j.result && j.result !== 'SUCCESS' &&
                                    j.result !== 'SKIPPED').length;
  return zuul.el('span', {class: 'jobs-summary'},
    `${done}/${jobs.length} jobs done${failed ? `, ${failed} failed` : ''}`);
}

function changeBox(item, position, now, pipeline, joined) {
  const [health, healthText] = itemHealth(item);
  const enqueued = item.enqueue_time ? new Date(item.enqueue_time) : null;
  const failing = (item.failing_reasons || []).length;
  const key = itemKey(item, pipeline);
  const collapsed = item.live && isCollapsed(key);
  const listId = `jobs-${key.replace(/[^A-Za-z0-9_-]/g, '-')}`;
  return zuul.el('li', {class: `change health-${health}${item.live ? '' : ' non-live'}`
                          + `${failing ? ' failing' : ''}${joined ? ' joined' : ''}`
                          + `${collapsed ? ' collapsed' : ''}`,
                        'data-change': item.id, 'data-position': position,
                        'data-project': item.project,
                        'aria-label': `${item.id} ${item.project}: ${healthText}`},
    joined ? zuul.el('span', {class: 'queue-line', 'aria-hidden': 'true'}) : null,
    zuul.el('div', {class: 'change-header'},
      item.live ? toggleButton(item, key, collapsed, listId) : null,
      zuul.el('span', {class: 'position'}, item.live ? `#${position}` : 'dependency'),
      zuul.el('span', {class: `health-badge badge-${health}`}, healthText),
      zuul.el('span', {class: 'change-id'}, changeLink(item)),
      zuul.el('span', {class: 'change-project'}, item.project),
      statusLink(item),
      enqueued ? zuul.el('time', {class: 'change-age', datetime: enqueued.toISOString(),
        title: `enqueued ${DATE_FORMAT.format(enqueued)}`},
        `queued ${zuul.duration(now - item.enqueue_time)}`) : null,
      item.remaining_time ? zuul.el('span', {class: 'change-eta',
        title: 'expected time to finish'}, `ETA ${eta(item.remaining_time)}`) : null),
    item.item_ahead ? zuul.el('div', {class: 'depends-on'}, `tested behind ${item.item_ahead}`)
      : null,
    failing ? zuul.el('div', {class: 'failing-reasons'},
      'Failing because ' + item.failing_reasons.join(', ')) : null,
    adminButtons(item, position, pipeline),
    item.live && collapsed ? jobSummary(item) : null,
    item.live ? zuul.el('ul', {class: 'jobs', id: listId, 'aria-label': `jobs of ${item.id}`,
      hidden: collapsed ? 'hidden' : null}, (item.jobs || []).map(jobRow)) : null);
}

// -- admin actions ------------------------------------------------------------

function projectPath(project) {
  return project.split('/').map(encodeURIComponent).join('/');
}

function adminButtons(item, position, pipeline) {
  const name = pipeline ? pipeline.name : item.pipeline;
  if (!zuul.auth || !zuul.auth.admin || !item.live || !name) return null;
  const target = CHANGE_RE.test(item.id) ? {change: item.id} : {ref: item.ref};
  const buttons = [actionButton('dequeue', item, name, `Dequeue ${item.id} from ${name}?`,
    () => zuul.request('POST', zuul.api(`project/${projectPath(item.project)}/dequeue`),
                       {pipeline: name, ...target}))];
  if (pipeline && pipeline.manager === 'dependent' && position > 1 && target.change) {
    buttons.push(actionButton('promote', item, name, `Promote ${item.id} to the head of ${name}?`,
      () => zuul.request('POST', zuul.api('promote'), {pipeline: name, changes: [item.id]})));
  }
  return zuul.el('div', {class: 'admin-actions'}, buttons);
}

function actionButton(action, item, pipelineName, question, run) {
  const label = action[0].toUpperCase() + action.slice(1);
  const button = zuul.el('button', {type: 'button', class: `action-${action}`,
    'data-focus-key': `${action}:${pipelineName}:${item.id}`,
    'aria-label': `${label} ${item.id}`}, label);
  button.addEventListener('click', async () => {
    if (!window.confirm(question)) return;
    button.disabled = true;
    try {
      await run();
      showMessage(`${label}d ${item.id}.`, false);
    } catch (e) {
      showMessage(`${label} of ${item.id} failed (${e.status || 'error'}): ${e.message}`, true);
    }
    refresh();
  });
  return button;
}

function showMessage(text, isError) {
  const box = document.getElementById('action-message');
  box.textContent = text;
  box.className = isError ? 'error' : 'notice';
  box.setAttribute('role', isError ? 'alert' : 'status');
}

// -- filter ---------------------------------------------------------------------

function filterTerms() {
  const value = new URLSearchParams(window.location.search).get('filter') || '';
  return value.toLowerCase().split(/\s+|(?<!\d),|,(?!\d)/).filter((t) => t);
}

// Terms are ORed; "1,2" is one change (a comma between digits is kept).
function matches(item, terms) {
  if (!terms.length) return true;
  const fields = [item.project, item.id, item.ref || ''].map((f) => String(f).toLowerCase());
  return terms.some((term) => fields.some((f) => f.includes(term)));
}

function filterBox() {
  const value = new URLSearchParams(window.location.search).get('filter') || '';
  const input = zuul.el('input', {type: 'search', id: 'filter', value,
    placeholder: 'project or change, e.g. org/project 1234,1'});
  input.addEventListener('input', () => {
    const url = new URL(window.location.href);
    if (input.value.trim()) url.searchParams.set('filter', input.value.trim());
    else url.searchParams.delete('filter');
    window.history.replaceState(null, '', url);
    render();
  });
  const all = (collapse) => {
    const button = zuul.el('button', {type: 'button', id: collapse ? 'collapse-all' : 'expand-all',
      'data-focus-key': collapse ? 'collapse-all' : 'expand-all'},
    collapse ? 'Collapse all' : 'Expand all');
    button.addEventListener('click', () => {
      state.collapseNew = collapse;
      state.collapsed = collapse ? new Set(state.seen) : new Set();
      render();
    });
    return button;
  };
  return zuul.el('div', {class: 'toolbar'},
    zuul.el('div', {role: 'search', class: 'search'},
      zuul.el('label', {for: 'filter'}, 'Filter'), input),
    all(false), all(true));
}

// -- enqueue (admins) -------------------------------------------------------------

function enqueueForm() {
  const box = document.getElementById('admin-tools');
  if (!box) return;
  if (!zuul.auth || !zuul.auth.admin || !state.status) {
    box.replaceChildren();
    return;
  }
  if (box.querySelector('form')) return;
  const field = (name, label, placeholder) => zuul.el('label', {}, `${label} `,
    zuul.el('input', {name, id: `enqueue-${name}`, placeholder, size: 18}));
  const pipelines = zuul.el('select', {name: 'pipeline', id: 'enqueue-pipeline'},
    state.status.pipelines.map((p) => zuul.el('option', {value: p.name}, p.name)));
  const form = zuul.el('form', {class: 'enqueue-form', id: 'enqueue-form'},
    zuul.el('strong', {}, 'Enqueue'),
    zuul.el('label', {}, 'pipeline ', pipelines),
    field('project', 'project', 'org/project'),
    field('change', 'change', 'N,P (or leave empty)'),
    field('ref', 'or ref', 'refs/heads/master'),
    zuul.el('button', {type: 'submit', id: 'enqueue-submit'}, 'Enqueue'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const project = String(data.get('project') || '').trim();
    const change = String(data.get('change') || '').trim();
    const ref = String(data.get('ref') || '').trim();
    const body = {pipeline: data.get('pipeline')};
    if (change) body.change = change; else body.ref = ref;
    if (!project || !(change || ref)) {
      showMessage('Enqueue needs a project and a change or a ref.', true);
      return;
    }
    try {
      await zuul.request('POST', zuul.api(`project/${projectPath(project)}/enqueue`), body);
      showMessage(`Enqueued ${change || ref} of ${project} into ${body.pipeline}.`, false);
    } catch (e) {
      showMessage(`Enqueue of ${change || ref} failed (${e.status || 'error'}): ${e.message}`,
        true);
    }
    refresh();
  });
  box.replaceChildren(form);
}

// -- pipelines --------------------------------------------------------------------

// The changes under test: items that are there only as the dependency
// of another (not live) are not counted.
function liveCount(items) {
  return items.filter((i) => i.live !== false).length;
}

function queueBox(queue, now, pipeline, terms) {
  const items = queue.heads.flat();
  const name = queue.name || [...new Set(items.map((i) => i.project))].join(', ');
  const heads = queue.heads.map((head) => {
    let position = 0;
    const boxes = [];
    let previous = null;
    for (const item of head) {
      if (item.live) position += 1;
      // a line joins a change to the box above when that is what it is
      // tested behind
      const joined = previous !== null && item.item_ahead === previous.id && boxes.length > 0;
      if (matches(item, terms)) boxes.push(changeBox(item, position, now, pipeline, joined));
      previous = item;
    }
    return boxes.length ? zuul.el('ol', {class: 'queue-head'}, boxes) : null;
  }).filter((h) => h);
  if (!heads.length) return null;
  const count = liveCount(items);
  return zuul.el('div', {class: 'change-queue', 'data-queue': name},
    zuul.el('div', {class: 'queue-name'}, `Queue: ${name}`,
      queue.window ? ` (window ${queue.window})` : '',
      ` — ${count} change${count === 1 ? '' : 's'}`),
    heads);
}

function pipelineBox(pipeline, now, terms) {
  const queues = pipeline.change_queues.map((q) => queueBox(q, now, pipeline, terms))
    .filter((q) => q);
  if (terms.length && !queues.length) return null;
  const count = pipeline.change_queues.reduce((n, q) => n + liveCount(q.heads.flat()), 0);
  const heading = `pipeline-${pipeline.name}`;
  return zuul.el('section', {class: 'pipeline', 'data-pipeline': pipeline.name,
                             'aria-labelledby': heading},
    zuul.el('h2', {id: heading}, pipeline.name,
      zuul.el('span', {class: 'count', 'aria-label': `${count} items`}, String(count))),
    pipeline.description ? zuul.el('p', {class: 'description'}, pipeline.description) : null,
    queues);
}

function summary(status) {
  const length = (q) => (q ? q.length : 0);
  return `Queue lengths: ${length(status.trigger_event_queue)} events, `
    + `${length(status.management_event_queue)} management events, `
    + `${length(status.result_event_queue)} results.`;
}

function renderPipelines(now) {
  const terms = filterTerms();
  const boxes = state.status.pipelines.map((p) => pipelineBox(p, now, terms)).filter((b) => b);
  document.getElementById('summary').textContent = summary(state.status);
  return boxes.length ? boxes : zuul.el('p', {class: 'empty'}, 'No item matches the filter.');
}

function renderChange(now) {
  if (!state.items.length) {
    return zuul.el('p', {class: 'empty'}, `Change ${zuul.arg} is not in any pipeline.`);
  }
  return state.items.map((item) => zuul.el('section', {class: 'pipeline',
      'data-pipeline': item.pipeline || '', 'aria-label': `${item.pipeline || ''} pipeline`},
    zuul.el('h2', {}, item.pipeline || 'pipeline'),
    zuul.el('ol', {class: 'queue-head'}, changeBox(item, 1, now, null, false))));
}

// Replace the pipelines, keeping keyboard focus on the same control.
function render() {
  if (!state.status && !state.items) return;
  const focusKey = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.focusKey : null;
  const now = Date.now();
  const content = zuul.arg ? renderChange(now) : renderPipelines(now);
  document.getElementById('pipelines').replaceChildren(...[content].flat());
  if (focusKey) {
    const again = document.querySelector(`[data-focus-key="${CSS.escape(focusKey)}"]`);
    if (again) again.focus();
  }
  document.getElementById('updated').textContent =
    `Updated ${new Date(now).toLocaleTimeString()}`;
  enqueueForm();
  document.body.dataset.loaded = 'yes';
  document.body.dataset.renders = String(Number(document.body.dataset.renders || 0) + 1);
}

function layout() {
  const title = zuul.arg ? zuul.el('h1', {}, `Change ${zuul.arg}`,
    ' ', zuul.el('a', {href: `/t/${encodeURIComponent(zuul.tenant)}/status`}, '(all changes)'))
    : zuul.el('h1', {class: 'visually-hidden'}, `Status of ${zuul.tenant}`);
  zuul.show(title, zuul.arg ? null : filterBox(),
    zuul.el('p', {class: 'summary'}, zuul.el('span', {id: 'summary'}), ' ',
            zuul.el('span', {id: 'updated'})),
    zuul.el('div', {id: 'admin-tools'}),
    zuul.el('p', {id: 'action-message', role: 'status'}),
    zuul.el('div', {id: 'status-error', role: 'alert'}),
    zuul.el('div', {class: 'pipelines', id: 'pipelines'}));
}

async function refresh() {
  clearTimeout(state.timer);
  state.timer = null;
  try {
    if (zuul.arg) {
      state.items = await zuul.getJSON(zuul.api(`status/change/${encodeURIComponent(zuul.arg)}`));
    } else {
      state.status = await zuul.getJSON(zuul.api('status'));
    }
    document.getElementById('status-error').replaceChildren();
    render();
  } catch (e) {
    const hint = e.status === 401 && !zuul.token()
      ? ' (this tenant is private: log in to see it)' : '';
    document.getElementById('status-error').replaceChildren(
      zuul.error(`Cannot load the status: ${e.message}${hint}`));
  }
  schedule();
}

// Poll only while the tab is visible; coming back refreshes at once.
function schedule() {
  if (!document.hidden && state.timer === null) state.timer = setTimeout(refresh, REFRESH_MS);
}

document.addEventListener('visibilitychange', () => {
  if (document.hidden) {
    clearTimeout(state.timer);
    state.timer = null;
  } else {
    refresh();
  }
});
document.addEventListener('zuul-auth', () => (state.status || state.items ? render() : refresh()));

layout();
refresh();
