'use strict';
// The tenant's labels (``label`` objects of its configuration).

zuulConfig.load('Labels', async () => {
  const labels = await zuul.getJSON(zuul.api('labels'));
  if (!labels.length) return zuulConfig.empty('No labels are defined in this tenant.');
  return zuulConfig.table('labels', 'Labels', ['Name', 'Image', 'Flavor', 'Min ready',
    'Description', 'Defined in'], labels,
  (l) => [l.name, l.image || '', l.flavor || '', String(l.min_ready ?? ''),
    l.description || '', zuulConfig.source(l.source_context)],
  (l) => ({class: 'label-row', 'data-label': l.name}));
});
