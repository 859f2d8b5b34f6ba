'use strict';
// One job: every variant (branches, where it is defined, playbooks,
// nodeset, vars, required projects, semaphores) and its parents; with
// ?project=&branch= (the form on the page) the job as frozen for that
// project and branch, with the exact inheritance path.

const JOB = zuul.arg;
const MAX_PARENTS = 30;

function list(items) {
  if (!items || !items.length) return 'none';
  return zuul.el('ul', {class: 'plain'}, items.map((i) => zuul.el('li', {}, i)));
}

function playbooks(items) {
  return list((items || []).map((p) => (typeof p === 'string' ? p : p.path)));
}

function nodeset(ns) {
  if (!ns) return 'none';
  if (typeof ns === 'string') return ns;
  return list((ns.nodes || []).map((n) => `${n.name}: ${n.label}`));
}

function variables(vars) {
  if (!vars || !Object.keys(vars).length) return 'none';
  return zuul.el('pre', {class: 'vars'}, JSON.stringify(vars, null, 2));
}

function flags(v) {
  const on = ['abstract', 'final', 'protected'].filter((f) => v[f]);
  return on.length ? on.join(', ') : 'none';
}

const FIELDS = [
  ['Description', (v) => v.description || ''],
  ['Parent', (v) => (v.parent ? zuulConfig.jobLink(v.parent) : 'not set here')],
  ['Branches', (v) => (v.branches && v.branches.length ? v.branches.join(', ') : 'all')],
  ['Defined in', (v) => zuulConfig.source(v.source_context)],
  ['Pre-run playbooks', (v) => playbooks(v.pre_run)],
  ['Run playbooks', (v) => playbooks(v.run)],
  ['Post-run playbooks', (v) => playbooks(v.post_run)],
  ['Nodeset', (v) => nodeset(v.nodeset)],
  ['Variables', (v) => variables(v.variables)],
  ['Required projects', (v) => list((v.required_projects || []).map(
    (p) => (typeof p === 'string' ? p : p.project_name || p.name)))],
  ['Semaphores', (v) => list(v.semaphores)],
  ['Dependencies', (v) => list((v.dependencies || []).map(
    (d) => (typeof d === 'string' ? d : d.name)))],
  ['Secrets', (v) => list(Array.isArray(v.secrets) ? v.secrets : Object.keys(v.secrets || {}))],
  ['Timeout', (v) => (v.timeout ? `${v.timeout} s` : 'default')],
  ['Voting', (v) => (v.voting === false ? 'no' : 'yes')],
  ['Attempts', (v) => String(v.attempts ?? '')],
  ['Flags', flags],
];

function details(v) {
  return zuul.el('table', {class: 'job-detail'}, zuul.el('tbody', {},
    FIELDS.map(([name, get]) => zuul.el('tr', {'data-field': name},
      zuul.el('th', {scope: 'row'}, name), zuul.el('td', {}, get(v))))));
}

function variantSection(v, i) {
  const branches = v.branches && v.branches.length ? v.branches.join(', ') : 'all branches';
  return zuul.el('section', {class: 'variant', 'data-variant': i,
    'aria-labelledby': `variant-${i}`},
  zuul.el('h2', {id: `variant-${i}`}, `Variant ${i + 1}: ${branches}`), details(v));
}

// The chain of parents from the first variants (a job without a parent
// inherits the tenant's default parent, "base", unless it is base).
async function parentChain(variants) {
  const chain = [JOB];
  let parent = variants[0].parent || (JOB === 'base' ? null : 'base');
  while (parent && !chain.includes(parent) && chain.length < MAX_PARENTS) {
    chain.push(parent);
    const next = await zuul.getJSON(zuul.api(`job/${encodeURIComponent(parent)}`));
    parent = next[0].parent || (parent === 'base' ? null : 'base');
  }
  return chain.reverse();
}

function freezeForm(projects, params) {
  const select = zuul.el('select', {id: 'freeze-project', name: 'project'},
    zuul.el('option', {value: ''}, '(choose a project)'),
    projects.map((p) => zuul.el('option', {value: p.name,
      selected: p.name === params.get('project') ? 'selected' : null}, p.name)));
  const branch = zuul.el('input', {id: 'freeze-branch', name: 'branch', type: 'text',
    value: params.get('branch') || '', placeholder: 'default branch'});
  return zuul.el('form', {class: 'freeze-form', method: 'get', 'aria-label':
    'Show the job as frozen for a project and branch'},
  zuul.el('label', {for: 'freeze-project'}, 'Project '), select, ' ',
  zuul.el('label', {for: 'freeze-branch'}, 'Branch '), branch, ' ',
  zuul.el('button', {type: 'submit'}, 'Freeze'));
}

async function frozenSection(params) {
  const q = new URLSearchParams({project: params.get('project')});
  if (params.get('branch')) q.set('branch', params.get('branch'));
  if (params.get('pipeline')) q.set('pipeline', params.get('pipeline'));
  const frozen = await zuul.getJSON(zuul.api(`job/${encodeURIComponent(JOB)}?${q}`));
  return zuul.el('section', {class: 'frozen', id: 'frozen', 'aria-labelledby': 'frozen-h'},
    zuul.el('h2', {id: 'frozen-h'}, `As frozen for ${frozen.project}@${frozen.branch}`),
    zuul.el('h3', {}, 'Inheritance path'),
    zuul.el('ol', {class: 'inheritance-path'},
      frozen.inheritance_path.map((line) => zuul.el('li', {}, line))),
    details(frozen.frozen));
}

zuulConfig.load(`Job ${JOB}`, async () => {
  const params = new URLSearchParams(location.search);
  const variants = await zuul.getJSON(zuul.api(`job/${encodeURIComponent(JOB)}`));
  // one request at a time: concurrent calls through zuul-web's Gearman
  // RPC client could get one another's answers (gear's submitJob)
  const chain = await parentChain(variants);
  const projects = await zuul.getJSON(zuul.api('projects'));
  const inheritance = zuul.el('nav', {class: 'parents', 'aria-label': 'Inheritance'},
    'Inherits: ', chain.flatMap((name, i) => [i ? ' → ' : '',
      name === JOB ? zuul.el('strong', {}, name) : zuulConfig.jobLink(name)]));
  let frozen = null;
  if (params.get('project')) {
    try {
      frozen = await frozenSection(params);
    } catch (e) {
      frozen = zuul.error(`Cannot freeze the job: ${e.message}`);
    }
  }
  return [inheritance, zuul.el('p', {class: 'summary'},
    `${variants.length} variant${variants.length === 1 ? '' : 's'}`),
  variants.map(variantSection), freezeForm(projects, params), frozen];
});
