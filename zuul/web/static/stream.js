'use strict';
// The live log of a running build: /t/<tenant>/stream/<build uuid>
// opens the console-stream websocket (released Zuul's protocol: send
// {"uuid", "logfile": "console.log"}, receive text frames) and renders
// the text with ANSI colours and line anchors as it arrives: every line a
// command or shell task prints on a node comes as the node prints it.
// While the stream is open a line under the title says which task runs,
// for how long, and how long since the last output, so a quiet task
// still shows it runs.  When the build has ended (or had already ended),
// the page links to the build's page.

const VERSION = new URL(document.currentScript.src).searchParams.get('v') || '';
const logview = import(`/static/logview.js?v=${VERSION}`);
const TASK_RE = /\| (TASK|HANDLER|PLAY) \[(.*)\]\s*$/;
const PHASE_RE = /\| ((?:PRE-RUN|RUN|POST-RUN|CLEANUP) START): /;
const STAMP_RE = /^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(\.\d{3})?/;

// When a line was written (the executor's local time), or now.
function stampOf(line) {
  const m = STAMP_RE.exec(line);
  const date = m ? new Date(`${m[1]}T${m[2]}${m[3] || ''}`) : null;
  return date && !Number.isNaN(date.getTime()) ? Math.min(date.getTime(), Date.now())
    : Date.now();
}

function buildPage() {
  return `/t/${encodeURIComponent(zuul.tenant)}/build/${encodeURIComponent(zuul.arg)}`;
}

// What runs now, from the lines seen: the last TASK (or PLAY) header.
function activityTracker(box) {
  const state = {what: 'Starting', since: Date.now(), last: Date.now(), open: true};
  function update() {
    if (!state.open) return;
    const now = Date.now();
    const quiet = now - state.last;
    box.className = `stream-activity${quiet >= 10000 ? ' quiet' : ''}`;
    box.textContent = `Running: ${state.what} for ${zuul.duration(now - state.since)}` +
      (quiet >= 3000 ? `; no output for ${zuul.duration(quiet)}` : '');
    box.dataset.quietMs = String(quiet);
  }
  const timer = setInterval(update, 1000);
  return {
    saw(text) {
      state.last = Date.now();
      for (const line of text.split('\n')) {
        const m = TASK_RE.exec(line) || PHASE_RE.exec(line);
        if (!m) continue;
        state.what = m[2] !== undefined ? `${m[1]} [${m[2]}]` : m[1];
        state.since = stampOf(line);
      }
      update();
    },
    stop(text) {
      state.open = false;
      clearInterval(timer);
      box.className = 'stream-activity';
      box.textContent = text;
    },
  };
}

// The stream could not be opened or was cut: is the build over?
async function explainEnd(state, event) {
  let build = null;
  try {
    build = await zuul.getJSON(zuul.api(`build/${encodeURIComponent(zuul.arg)}`));
  } catch (e) {
    build = null;
  }
  if (build && build.result) {
    state.replaceChildren(`This build has finished (${build.result}): `,
      zuul.el('a', {href: buildPage(), id: 'build-link'}, 'see its build page'),
      ' for its logs and console.');
    state.className = 'stream-state';
    return;
  }
  state.textContent = `The stream ended: ${event.reason || 'connection lost'} (${event.code})`;
  state.className = 'stream-state error';
}

async function start() {
  const {lineRenderer, highlight} = await logview;
  const pre = zuul.el('pre', {class: 'log-text', id: 'log-text', 'aria-live': 'off'});
  const state = zuul.el('p', {class: 'stream-state', id: 'stream-state', role: 'status'},
    'Connecting…');
  const activity = zuul.el('p', {class: 'stream-activity', id: 'stream-activity'});
  const follow = zuul.el('input', {type: 'checkbox', id: 'follow', checked: 'checked'});
  zuul.show(zuul.el('h1', {}, `Live log of build ${zuul.arg}`), state, activity,
    zuul.el('label', {}, follow, ' follow the end'), pre);
  const write = lineRenderer(pre);
  const tracker = activityTracker(activity);
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const socket = new WebSocket(`${scheme}://${location.host}` +
    zuul.api('console-stream'));
  let received = false;
  socket.onopen = () => {
    state.textContent = 'Streaming';
    const logfile = new URLSearchParams(location.search).get('logfile') || 'console.log';
    socket.send(JSON.stringify({uuid: zuul.arg, logfile}));
  };
  socket.onmessage = (event) => {
    received = true;
    write(event.data, false);
    tracker.saw(event.data);
    document.body.dataset.lines = String(pre.querySelectorAll('.line').length);
    if (follow.checked) window.scrollTo(0, document.body.scrollHeight);
  };
  socket.onclose = async (event) => {
    write('', true);
    document.body.dataset.lines = String(pre.querySelectorAll('.line').length);
    const ended = event.code === 1000;
    if (ended) {
      tracker.stop('');
      state.replaceChildren('The build has finished: end of log. ',
        zuul.el('a', {href: buildPage(), id: 'build-link'}, 'The build page'),
        ' has its result, logs and console.');
    } else {
      tracker.stop('');
      if (!received) await explainEnd(state, event);
      else {
        state.textContent = `The stream ended: ${event.reason || 'connection lost'} ` +
          `(${event.code})`;
        state.className = 'stream-state error';
      }
    }
    document.body.dataset.closed = String(event.code);
    highlight(pre, location.hash);
  };
  document.body.dataset.loaded = 'yes';
}

start().catch((e) => zuul.show(zuul.error(`Cannot open the live log: ${e.message}`)));
