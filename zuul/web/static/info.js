'use strict';
// What this tenant's zuul-web offers: capabilities and login realms,
// and where the projects' public keys are.

zuulConfig.load('Tenant information', async () => {
  const {info} = await zuul.getJSON(zuul.api('info'));
  const auth = info.capabilities.auth || {};
  const realms = Object.entries(auth.realms || {});
  const keyUrl = `/api/tenant/${encodeURIComponent(zuul.tenant)}/key/<project>.pub`;
  const facts = [['Tenant', info.tenant],
    ['Build history', info.capabilities.job_history ? 'available' : 'not configured'],
    ['Default login realm', auth.default_realm || 'none'],
    ['Login realms', realms.length ? zuul.el('ul', {class: 'plain'}, realms.map(([name, r]) =>
      zuul.el('li', {}, `${name}: ${r.driver} (${r.authority})`))) : 'none'],
    ['Secrets public keys', zuul.el('code', {}, keyUrl)]];
  return zuul.el('table', {class: 'job-detail', id: 'tenant-info'}, zuul.el('tbody', {},
    facts.map(([k, v]) => zuul.el('tr', {'data-field': k}, zuul.el('th', {scope: 'row'}, k),
      zuul.el('td', {}, v)))));
});
