// Log rendering shared by the build page and the live log page (an ES
// module, loaded with import()): text with ANSI colours and numbered line
// anchors (#L12, #L12-20 highlighted), and job-output.json as a task list.

// The 16 ANSI colours (30-37 / 90-97 foreground, 40-47 / 100-107 background).
const PALETTE = ['#2e3436', '#cc0000', '#4e9a06', '#c4a000', '#3465a4', '#75507b',
  '#06989a', '#d3d7cf', '#555753', '#ef2929', '#8ae234', '#fce94f', '#729fcf',
  '#ad7fa8', '#34e2e2', '#eeeeec'];
// SGR sequences are styled; any other escape sequence is dropped.
const ESCAPE_RE = /\x1b\[([0-9;]*)([A-Za-z])|\x1b[()][0-9A-Za-z]|\x1b[=>]/g;

function applySgr(state, params) {
  const codes = params === '' ? [0] : params.split(';').map((n) => parseInt(n, 10) || 0);
  for (let i = 0; i < codes.length; i++) {
    const c = codes[i];
    if (c === 0) { state.fg = null; state.bg = null; state.bold = false; state.underline = false; }
    else if (c === 1) state.bold = true;
    else if (c === 4) state.underline = true;
    else if (c === 22) state.bold = false;
    else if (c === 24) state.underline = false;
    else if (c >= 30 && c <= 37) state.fg = PALETTE[c - 30];
    else if (c >= 90 && c <= 97) state.fg = PALETTE[c - 90 + 8];
    else if (c === 39) state.fg = null;
    else if (c >= 40 && c <= 47) state.bg = PALETTE[c - 40];
    else if (c >= 100 && c <= 107) state.bg = PALETTE[c - 100 + 8];
    else if (c === 49) state.bg = null;
    else if ((c === 38 || c === 48) && codes[i + 1] === 5) {
      const n = codes[i + 2] || 0;  // 256 colours: the 16 we have, grey above
      const colour = n < 16 ? PALETTE[n] : '#888';
      if (c === 38) state.fg = colour; else state.bg = colour;
      i += 2;
    }
  }
}

function styled(state, text) {
  if (!state.fg && !state.bg && !state.bold && !state.underline) {
    return document.createTextNode(text);
  }
  const span = document.createElement('span');
  span.className = 'ansi';
  const style = [];
  if (state.fg) style.push(`color: ${state.fg}`);
  if (state.bg) style.push(`background-color: ${state.bg}`);
  if (state.bold) style.push('font-weight: bold');
  if (state.underline) style.push('text-decoration: underline');
  span.setAttribute('style', style.join('; '));
  span.textContent = text;
  return span;
}

// Render `text` as numbered lines into `container` (a <pre>), continuing
// from the lines already there; returns a renderer that takes more text
// (the live log), keeping colour state and a partial last line.
export function lineRenderer(container) {
  const state = {fg: null, bg: null, bold: false, underline: false};
  let partial = '';
  let count = container.querySelectorAll('.line').length;
  let current = null;

  function newLine() {
    count += 1;
    current = document.createElement('span');
    current.className = 'line';
    current.id = `L${count}`;
    const anchor = document.createElement('a');
    anchor.className = 'ln';
    anchor.href = `#L${count}`;
    anchor.textContent = String(count);
    anchor.setAttribute('aria-label', `line ${count}`);
    anchor.setAttribute('style', 'display: inline-block; min-width: 4em; color: #888; ' +
      'text-align: right; padding-right: 1em; user-select: none; text-decoration: none');
    current.append(anchor);
    container.append(current);
  }

  function addSegment(segment) {
    let last = 0;
    ESCAPE_RE.lastIndex = 0;
    for (let m = ESCAPE_RE.exec(segment); m; m = ESCAPE_RE.exec(segment)) {
      if (m.index > last) current.append(styled(state, segment.slice(last, m.index)));
      if (m[2] === 'm') applySgr(state, m[1]);
      last = ESCAPE_RE.lastIndex;
    }
    if (last < segment.length) current.append(styled(state, segment.slice(last)));
  }

  return function write(text, final) {
    const lines = (partial + text).split('\n');
    partial = final ? '' : lines.pop();
    if (final && lines[lines.length - 1] === '') lines.pop();
    for (const line of lines) {
      newLine();
      addSegment(line.replace(/\r$/, ''));
      current.append('\n');
    }
    return count;
  };
}

// Highlight the lines a "#L12" or "#L12-20" fragment names; returns the
// first highlighted line (scrolled into view) or null.
export function highlight(container, hash) {
  for (const old of container.querySelectorAll('.line.highlight')) {
    old.classList.remove('highlight');
    old.style.backgroundColor = '';
  }
  const m = /^#L(\d+)(?:-L?(\d+))?$/.exec(hash || '');
  if (!m) return null;
  const first = parseInt(m[1], 10);
  const last = m[2] ? parseInt(m[2], 10) : first;
  let firstNode = null;
  for (let n = first; n <= last && n - first < 10000; n++) {
    const node = container.querySelector(`#L${n}`);
    if (!node) break;
    node.classList.add('highlight');
    node.style.backgroundColor = '#fff3a0';
    firstNode = firstNode || node;
  }
  if (firstNode) firstNode.scrollIntoView({block: 'center'});
  return firstNode;
}

// job-output.json (a list of playbooks, each with plays, each with
// tasks and their per-host results) as a table: one row per task and host.
export function taskRows(playbooks) {
  const rows = [];
  for (const playbook of Array.isArray(playbooks) ? playbooks : []) {
    const phase = playbook.phase || '';
    const name = playbook.playbook || '';
    for (const play of playbook.plays || []) {
      for (const task of play.tasks || []) {
        const hosts = task.hosts || {};
        for (const [host, result] of Object.entries(hosts)) {
          rows.push({playbook: name, phase, play: (play.play || {}).name || '',
            task: (task.task || {}).name || '', host, result: taskResult(result),
            msg: result.msg ? String(result.msg) : ''});
        }
      }
    }
  }
  return rows;
}

function taskResult(r) {
  if (r.status) return String(r.status).toUpperCase();  // what zuul_stream recorded
  if (r.failed) return 'FAILED';
  if (r.unreachable) return 'UNREACHABLE';
  if (r.skipped) return 'SKIPPED';
  if (r.changed) return 'CHANGED';
  return 'OK';
}
