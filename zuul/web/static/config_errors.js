'use strict';
// The tenant's configuration errors, per project, with file and line
// (?project= shows one project's).

function location_(e) {
  const sc = e.source_context;
  return sc ? `${sc.path}${e.line ? ':' + e.line : ''}` : '';
}

zuulConfig.load('Configuration errors', async () => {
  const project = new URLSearchParams(location.search).get('project');
  const errors = await zuul.getJSON(zuul.api(project
    ? `config-errors?project=${encodeURIComponent(project)}` : 'config-errors'));
  if (!errors.length) return zuulConfig.empty('No configuration errors.');
  const byProject = new Map();
  for (const e of errors) {
    const name = e.source_context ? e.source_context.project : '(tenant configuration)';
    byProject.set(name, (byProject.get(name) || []).concat([e]));
  }
  return [zuul.el('p', {class: 'summary'}, `${errors.length} error` +
    `${errors.length === 1 ? '' : 's'} in ${byProject.size} project` +
    `${byProject.size === 1 ? '' : 's'}`),
  [...byProject.entries()].map(([name, list], i) => zuul.el('section', {
    class: 'config-error-project', 'data-project': name, 'aria-labelledby': `errors-${i}`},
  zuul.el('h2', {id: `errors-${i}`}, name),
  zuulConfig.table(null, `Errors in ${name}`, ['Branch', 'File:line', 'Severity', 'Error'],
    list, (e) => [e.source_context ? e.source_context.branch : '', location_(e),
      e.severity || 'error', zuul.el('pre', {class: 'config-error-text'}, e.error)],
    (e) => ({class: 'config-error', 'data-where': location_(e)}))))];
});
