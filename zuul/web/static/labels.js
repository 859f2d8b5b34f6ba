'use strict';
// The tenant's labels: ``label`` objects of its configuration and the
// labels nodepool launchers serve (with the launcher pools serving each).

zuulConfig.load('Labels', async () => {
  const labels = await zuul.getJSON(zuul.api('labels'));
  if (!labels.length) {
    return zuulConfig.empty('No labels: none is defined in this tenant and no launcher ' +
      'serves one.');
  }
  return zuulConfig.table('labels', 'Labels', ['Name', 'Served by', 'Image', 'Flavor',
    'Min ready', 'Description', 'Defined in'], labels,
  (l) => [l.name, (l.launchers || []).join(', '), l.image || '', l.flavor || '',
    String(l.min_ready ?? ''), l.description || '',
    l.source_context ? zuulConfig.source(l.source_context) : ''],
  (l) => ({class: 'label-row', 'data-label': l.name}));
});
