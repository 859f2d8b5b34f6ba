'use strict';
// The tenant's semaphores and who holds them.

function holders(sem) {
  const h = sem.holders;
  const items = h.this_tenant.map((x) => zuul.el('li', {class: 'holder'},
    x.job_name ? [zuulConfig.jobLink(x.job_name), ` (buildset ${x.buildset_uuid})`]
      : [`playbook ${x.playbook} of build `, zuulConfig.link(`build/${x.build_uuid}`,
        x.build_uuid)]));
  if (h.other_tenants) {
    items.push(zuul.el('li', {}, `${h.other_tenants} in other tenants`));
  }
  return items.length ? zuul.el('ul', {class: 'plain'}, items) : 'none';
}

zuulConfig.load('Semaphores', async () => {
  const sems = await zuul.getJSON(zuul.api('semaphores'));
  if (!sems.length) return zuulConfig.empty('No semaphores are defined in this tenant.');
  return zuulConfig.table('semaphores', 'Semaphores', ['Name', 'Held', 'Max', 'Global',
    'Holders'], sems,
  (s) => [s.name, String(s.holders.count), String(s.max), s.global ? 'yes' : 'no',
    holders(s)],
  (s) => ({class: 'semaphore-row', 'data-semaphore': s.name,
    'data-held': s.holders.count}));
});
