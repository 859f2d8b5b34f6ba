'use strict';
// The status page: pipelines, their shared queues drawn as queues, each
// change with its position and age, and each job's state with a progress
// bar from its expected duration. Polls the status API every few seconds.

const REFRESH_MS = 5000;

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
  return zuul.el('div', {class: 'progress', title},
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
    link = zuul.el('a', {class: 'live-log',
      href: zuul.api(`console-stream?uuid=${encodeURIComponent(job.uuid)}`)}, job.name);
  }
  const state = jobState(job);
  const cls = state.split(' ')[0].toLowerCase();
  const remaining = job.remaining_time ? ` ${zuul.duration(job.remaining_time)} left` : '';
  return zuul.el('li', {class: `job job-${cls}`, 'data-job': job.name},
    zuul.el('span', {class: 'job-name'}, link, job.voting === false ? ' (non-voting)' : ''),
    progressBar(job),
    zuul.el('span', {class: `job-state state-${cls}`}, state + remaining));
}

function changeBox(item, position, now) {
  const age = item.enqueue_time ? `queued ${zuul.duration(now - item.enqueue_time)}` : '';
  const title = item.url ? zuul.el('a', {href: item.url}, item.id) : item.id;
  const failing = item.failing_reasons && item.failing_reasons.length;
  return zuul.el('li', {class: `change${item.live ? '' : ' non-live'}${failing ? ' failing' : ''}`,
                        'data-change': item.id, 'data-position': position},
    zuul.el('div', {class: 'change-header'},
      zuul.el('span', {class: 'position'}, `#${position}`),
      zuul.el('span', {class: 'change-id'}, title),
      zuul.el('span', {class: 'change-project'}, item.project),
      zuul.el('span', {class: 'change-age', title: 'time in queue'}, age),
      item.remaining_time ? zuul.el('span', {class: 'change-eta',
        title: 'expected time to finish'}, `ETA ${eta(item.remaining_time)}`) : null),
    failing ? zuul.el('div', {class: 'failing-reasons'},
      'Failing because ' + item.failing_reasons.join(', ')) : null,
    item.live ? zuul.el('ul', {class: 'jobs'}, (item.jobs || []).map(jobRow)) : null);
}

function queueBox(queue, now) {
  const items = queue.heads.flat();
  const name = queue.name || [...new Set(items.map((i) => i.project))].join(', ');
  const heads = queue.heads.map((head) => {
    let position = 0;
    return zuul.el('ol', {class: 'queue-head'}, head.map((item) => {
      if (item.live) position += 1;
      return changeBox(item, position, now);
    }));
  });
  return zuul.el('div', {class: 'change-queue', 'data-queue': name},
    zuul.el('div', {class: 'queue-name'}, `Queue: ${name}`,
      queue.window ? ` (window ${queue.window})` : '', ` — ${items.length} item(s)`),
    heads);
}

function pipelineBox(pipeline, now) {
  const queues = pipeline.change_queues.filter((q) => q.heads.length);
  const count = queues.reduce((n, q) => n + q.heads.flat().length, 0);
  return zuul.el('section', {class: 'pipeline', 'data-pipeline': pipeline.name},
    zuul.el('h2', {}, pipeline.name, zuul.el('span', {class: 'count'}, String(count))),
    pipeline.description ? zuul.el('p', {class: 'description'}, pipeline.description) : null,
    queues.map((q) => queueBox(q, now)));
}

async function refresh() {
  try {
    const status = await zuul.getJSON(zuul.api('status'));
    const now = Date.now();
    zuul.show(
      zuul.el('p', {class: 'summary'},
        `Queue lengths: ${status.trigger_event_queue ? status.trigger_event_queue.length : 0}`
        + ' events, '
        + `${status.management_event_queue ? status.management_event_queue.length : 0}`
        + ' management events, '
        + `${status.result_event_queue ? status.result_event_queue.length : 0} results.`),
      zuul.el('div', {class: 'pipelines', id: 'pipelines'},
        status.pipelines.map((p) => pipelineBox(p, now))));
    document.body.dataset.loaded = 'yes';
  } catch (e) {
    zuul.show(zuul.error(`Cannot load the status: ${e.message}`));
  }
  setTimeout(refresh, REFRESH_MS);
}

refresh();
