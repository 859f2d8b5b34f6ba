'use strict';
// The tenant's jobs, with a filter box over name, description and tags.

function jobRow(job) {
  const branches = job.variants.flatMap((v) => v.branches);
  return [zuulConfig.jobLink(job.name), job.description || '',
    `${job.variants.length}${branches.length ? ' (' + branches.join(', ') + ')' : ''}`,
    job.variants.map((v) => v.parent).filter(Boolean).join(', '),
    (job.tags || []).join(', ')];
}

function applyFilter(rows, count, text) {
  let shown = 0;
  for (const row of rows) {
    row.hidden = Boolean(text) && !row.dataset.search.includes(text);
    if (!row.hidden) shown += 1;
  }
  count.textContent = `${shown} of ${rows.length} jobs`;
}

zuulConfig.load('Jobs', async () => {
  const jobs = await zuul.getJSON(zuul.api('jobs'));
  const table = zuulConfig.table('jobs', 'Jobs of this tenant',
    ['Name', 'Description', 'Variants', 'Parent', 'Tags'], jobs, jobRow,
    (job) => ({class: 'job-row', 'data-job': job.name, 'data-search':
      [job.name, job.description || '', ...(job.tags || [])].join(' ').toLowerCase()}));
  const rows = [...table.querySelectorAll('tr.job-row')];
  const count = zuul.el('p', {id: 'jobs-count', class: 'summary', 'aria-live': 'polite'});
  const box = zuulConfig.filterBox('Filter jobs', (text) => applyFilter(rows, count, text));
  applyFilter(rows, count, box.value.trim().toLowerCase());
  return [zuul.el('div', {class: 'filter-bar'}, box), count, table];
});
