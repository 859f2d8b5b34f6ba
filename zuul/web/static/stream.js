'use strict';
// The live log of a running build: /t/<tenant>/stream/<build uuid>
// opens the console-stream websocket (released Zuul's protocol: send
// {"uuid", "logfile": "console.log"}, receive text frames) and renders
// the text with ANSI colours and line anchors as it arrives.

const VERSION = new URL(document.currentScript.src).searchParams.get('v') || '';
const logview = import(`/static/logview.js?v=${VERSION}`);

async function start() {
  const {lineRenderer, highlight} = await logview;
  const pre = zuul.el('pre', {class: 'log-text', id: 'log-text', 'aria-live': 'off'});
  const state = zuul.el('p', {class: 'stream-state', id: 'stream-state', role: 'status'},
    'Connecting…');
  const follow = zuul.el('input', {type: 'checkbox', id: 'follow', checked: 'checked'});
  zuul.show(zuul.el('h1', {}, `Live log of build ${zuul.arg}`), state,
    zuul.el('label', {}, follow, ' follow the end'), pre);
  const write = lineRenderer(pre);
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const socket = new WebSocket(`${scheme}://${location.host}` +
    zuul.api('console-stream'));
  socket.onopen = () => {
    state.textContent = 'Streaming';
    const logfile = new URLSearchParams(location.search).get('logfile') || 'console.log';
    socket.send(JSON.stringify({uuid: zuul.arg, logfile}));
  };
  socket.onmessage = (event) => {
    write(event.data, false);
    if (follow.checked) window.scrollTo(0, document.body.scrollHeight);
  };
  socket.onclose = (event) => {
    write('', true);
    const ended = event.code === 1000;
    state.textContent = ended ? 'The build has finished: end of log.' :
      `The stream ended: ${event.reason || 'connection lost'} (${event.code})`;
    if (!ended) state.className = 'stream-state error';
    document.body.dataset.closed = String(event.code);
    highlight(pre, location.hash);
  };
  document.body.dataset.loaded = 'yes';
}

start().catch((e) => zuul.show(zuul.error(`Cannot open the live log: ${e.message}`)));
