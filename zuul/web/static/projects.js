'use strict';
// The tenant's projects, with a filter box.

zuulConfig.load('Projects', async () => {
  const projects = await zuul.getJSON(zuul.api('projects'));
  const table = zuulConfig.table('projects', 'Projects of this tenant',
    ['Name', 'Type', 'Connection', 'Canonical name'], projects,
    (p) => [zuulConfig.projectLink(p.name), p.type, p.connection_name, p.canonical_name],
    (p) => ({class: 'project-row', 'data-project': p.name}));
  const rows = [...table.querySelectorAll('tr.project-row')];
  const filter = (text) => rows.forEach((row) => {
    row.hidden = Boolean(text) && !row.dataset.project.toLowerCase().includes(text);
  });
  const box = zuulConfig.filterBox('Filter projects', filter);
  filter(box.value.trim().toLowerCase());
  return [zuul.el('div', {class: 'filter-bar'}, box), table];
});
