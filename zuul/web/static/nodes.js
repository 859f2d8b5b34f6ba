'use strict';
// Nodepool's nodes (those of other tenants are not shown).

function age(seconds) {
  return seconds ? zuul.duration(Date.now() - seconds * 1000) : '';
}

zuulConfig.load('Nodes', async () => {
  const nodes = await zuul.getJSON(zuul.api('nodes'));
  if (!nodes.length) return zuulConfig.empty('No nodes.');
  return zuulConfig.table('nodes', 'Nodes', ['ID', 'Label', 'Provider', 'State',
    'In state for', 'External ID', 'Held for', 'Comment'], nodes,
  (n) => [n.id, (n.type || []).join(', '), n.provider, n.state, age(n.state_time),
    n.external_id || '', n.hold_job || '', n.comment || ''],
  (n) => ({class: `node-row state-${n.state}`, 'data-node': n.id}));
});
