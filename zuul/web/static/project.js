'use strict';
// One project: where it is configured, and per pipeline its jobs and
// their job graph (drawn as inline SVG: a column per dependency depth,
// an arrow from each dependency to the job that needs it; soft
// dependencies dashed). ?branch= picks the branch (default: the
// project's default branch).

const PROJECT = zuul.arg;
const SVG_NS = 'http://www.w3.org/2000/svg';
const BOX = {w: 180, h: 28, dx: 60, dy: 14, pad: 10, chars: 22};

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Column (longest chain of dependencies before it) and row of each job;
// the API lists the jobs in dependency order.
function layout(jobs) {
  const depth = {};
  const rows = [];
  const place = {};
  for (const job of jobs) {
    const deps = job.dependencies.map((d) => depth[d.name]).filter((d) => d !== undefined);
    depth[job.name] = deps.length ? Math.max(...deps) + 1 : 0;
    const col = depth[job.name];
    rows[col] = (rows[col] || 0) + 1;
    place[job.name] = {x: BOX.pad + col * (BOX.w + BOX.dx),
      y: BOX.pad + (rows[col] - 1) * (BOX.h + BOX.dy)};
  }
  const width = BOX.pad * 2 + rows.length * BOX.w + Math.max(rows.length - 1, 0) * BOX.dx;
  const height = BOX.pad * 2 + Math.max(...rows, 1) * (BOX.h + BOX.dy) - BOX.dy;
  return {place, width, height};
}

function edge(from, to, dep, job, arrow) {
  const x1 = from.x + BOX.w; const y1 = from.y + BOX.h / 2;
  const x2 = to.x; const y2 = to.y + BOX.h / 2;
  const mid = (x1 + x2) / 2;
  return svg('path', {d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2 - 4},${y2}`,
    class: dep.soft ? 'graph-edge soft' : 'graph-edge', 'marker-end': `url(#${arrow})`,
    'data-from': dep.name, 'data-to': job});
}

function jobBox(name, at) {
  const label = name.length > BOX.chars ? name.slice(0, BOX.chars - 1) + '…' : name;
  const href = `/t/${encodeURIComponent(zuul.tenant)}/job/${encodeURIComponent(name)}`;
  return svg('a', {href, class: 'graph-job', 'data-job': name},
    svg('title', {}, name),
    svg('rect', {x: at.x, y: at.y, width: BOX.w, height: BOX.h, rx: 4}),
    svg('text', {x: at.x + 8, y: at.y + BOX.h / 2 + 5}, label));
}

function graph(pipeline, jobs) {
  if (!jobs.length) return zuulConfig.empty('No jobs run on this branch.');
  const {place, width, height} = layout(jobs);
  const arrow = `arrow-${pipeline.replace(/[^A-Za-z0-9_-]/g, '_')}`;
  // data-from/data-to name each edge's dependency and dependent job
  const edges = jobs.flatMap((job) => job.dependencies.filter((d) => place[d.name]).map(
    (d) => edge(place[d.name], place[job.name], d, job.name, arrow)));
  const drawing = svg('svg', {class: 'job-graph', width, height,
    viewBox: `0 0 ${width} ${height}`, role: 'group',
    'aria-label': `Job graph of the ${pipeline} pipeline`},
  svg('defs', {}, svg('marker', {id: arrow, viewBox: '0 0 8 8', refX: 4, refY: 4,
    markerWidth: 8, markerHeight: 8, orient: 'auto'},
  svg('path', {d: 'M0,0 L8,4 L0,8 z', class: 'graph-arrow'}))),
  edges, jobs.map((job) => jobBox(job.name, place[job.name])));
  const described = zuul.el('ul', {class: 'graph-deps'}, jobs.map((job) =>
    zuul.el('li', {}, zuulConfig.jobLink(job.name), job.dependencies.length
      ? ` needs ${job.dependencies.map((d) => d.name + (d.soft ? ' (soft)' : ''))
        .join(', ')}` : ' needs nothing')));
  return [zuul.el('div', {class: 'graph-scroll'}, drawing),
    zuul.el('details', {}, zuul.el('summary', {}, 'Dependencies as text'), described)];
}

async function pipelineSection(name, config, branch) {
  const path = `pipeline/${encodeURIComponent(name)}/project/${PROJECT}/branch/` +
    `${branch.split('/').map(encodeURIComponent).join('/')}/freeze-jobs`;
  let drawn;
  try {
    drawn = graph(name, await zuul.getJSON(zuul.api(path)));
  } catch (e) {
    drawn = zuul.error(`Cannot freeze the jobs: ${e.message}`);
  }
  const jobs = config.jobs.map((variants) => variants[0].name);
  return zuul.el('section', {class: 'project-pipeline', 'data-pipeline': name,
    'aria-labelledby': `pipeline-${name}`},
  zuul.el('h2', {id: `pipeline-${name}`}, name),
  config.queue_name ? zuul.el('p', {class: 'summary'}, `Queue: ${config.queue_name}`) : null,
  zuul.el('p', {}, 'Jobs: ', jobs.flatMap((j, i) => [i ? ', ' : '', zuulConfig.jobLink(j)])),
  drawn);
}

function branchForm(branch) {
  return zuul.el('form', {class: 'freeze-form', method: 'get',
    'aria-label': 'Show the job graphs of another branch'},
  zuul.el('label', {for: 'graph-branch'}, 'Job graphs for branch '),
  zuul.el('input', {id: 'graph-branch', name: 'branch', type: 'text', value: branch}), ' ',
  zuul.el('button', {type: 'submit'}, 'Show'),
  zuul.el('p', {class: 'summary'}, 'An arrow points from a job to the jobs that need it; ' +
    'dashed arrows are soft dependencies (the job runs even when the other does not).'));
}

zuulConfig.load(`Project ${PROJECT}`, async () => {
  const project = await zuul.getJSON(zuul.api(`project/${PROJECT}`));
  const configs = project.configs || [];
  const defaultBranch = configs.length ? configs[0].default_branch : 'master';
  const branch = new URLSearchParams(location.search).get('branch') || defaultBranch;
  const pipelines = new Map();
  for (const config of configs) {
    for (const pl of config.pipelines) {
      const seen = pipelines.get(pl.name);
      pipelines.set(pl.name, seen ? {...seen, jobs: seen.jobs.concat(pl.jobs)} : pl);
    }
  }
  const facts = [['Canonical name', project.canonical_name],
    ['Connection', project.connection_name], ['Type', project.type],
    ['Default branch', defaultBranch],
    ['Merge mode', configs.length ? configs[0].merge_mode : ''],
    ['Templates', [...new Set(configs.flatMap((c) => c.templates))].join(', ') || 'none'],
    ['Configured in', zuul.el('ul', {class: 'plain'}, configs.map((c) =>
      zuul.el('li', {}, zuulConfig.source(c.source_context))))]];
  const sections = [];
  for (const [name, config] of pipelines) {   // one request at a time, as in job.js
    sections.push(await pipelineSection(name, config, branch));
  }
  return [zuul.el('table', {class: 'job-detail'}, zuul.el('tbody', {}, facts.map(([k, v]) =>
    zuul.el('tr', {}, zuul.el('th', {scope: 'row'}, k), zuul.el('td', {}, v))))),
  branchForm(branch),
  sections.length ? sections : zuulConfig.empty('This project runs no jobs in any pipeline.')];
});
