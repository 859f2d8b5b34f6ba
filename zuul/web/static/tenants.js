'use strict';
// The tenant list at /.
(async () => {
  try {
    const tenants = await zuul.getJSON('/api/tenants');
    zuul.show(zuul.el('h1', {}, 'Tenants'), zuul.el('ul', {class: 'tenants'},
      tenants.map((t) => zuul.el('li', {class: 'tenant-entry'},
        zuul.el('a', {href: `/t/${encodeURIComponent(t.name)}/status`}, t.name),
        ` — ${t.projects} projects, ${t.queue} queued`))));
  } catch (e) {
    zuul.show(zuul.error(e.message));
  }
})();
