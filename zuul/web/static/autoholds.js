'use strict';
// The tenant's autohold requests (?project= shows one project's).

function expiry(seconds) {
  return seconds ? zuul.duration(seconds * 1000) : 'never';
}

zuulConfig.load('Autoholds', async () => {
  const project = new URLSearchParams(location.search).get('project');
  const holds = await zuul.getJSON(zuul.api(project
    ? `autohold?project=${encodeURIComponent(project)}` : 'autohold'));
  if (!holds.length) return zuulConfig.empty('No autohold requests.');
  return zuulConfig.table('autoholds', 'Autohold requests', ['ID', 'Project', 'Job',
    'Ref filter', 'Held', 'Reason', 'Nodes kept for', 'Held nodes'], holds,
  (h) => [h.id, zuulConfig.projectLink(h.project), zuulConfig.jobLink(h.job), h.ref_filter,
    `${h.current_count} of ${h.max_count}`, h.reason || '', expiry(h.node_hold_expiration),
    (h.nodes || []).map((n) => `${n.build}: ${(n.nodes || []).join(', ')}`).join('; ')],
  (h) => ({class: 'autohold-row', 'data-autohold': h.id}));
});
