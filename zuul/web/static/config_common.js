// Helpers of the configuration pages (jobs, job, projects, project,
// nodes, labels, semaphores, autoholds, config errors, tenant info).
'use strict';

const zuulConfig = {
  // A link to another page of this tenant: link('job/x', 'x').
  link(path, text) {
    return zuul.el('a', {href: `/t/${encodeURIComponent(zuul.tenant)}/${path}`}, text);
  },

  jobLink(name) {
    return zuulConfig.link(`job/${encodeURIComponent(name)}`, name);
  },

  projectLink(name) {
    return zuulConfig.link(`project/${name.split('/').map(encodeURIComponent).join('/')}`,
      name);
  },

  // A data table: column headers (scope=col), one row per entry; a row
  // is a list of cells (text or nodes), ``attrs(entry)`` the row's
  // attributes.
  table(id, caption, headers, entries, row, attrs) {
    return zuul.el('table', {class: 'config-table', id},
      zuul.el('caption', {}, caption),
      zuul.el('thead', {}, zuul.el('tr', {},
        headers.map((h) => zuul.el('th', {scope: 'col'}, h)))),
      zuul.el('tbody', {}, entries.map((entry) => zuul.el('tr', attrs ? attrs(entry) : {},
        row(entry).map((cell) => zuul.el('td', {}, cell))))));
  },

  // "org/config/zuul.yaml@master" (with ":LINE" when given).
  source(sc, line) {
    if (!sc) return '';
    return `${sc.project}/${sc.path}${line ? ':' + line : ''}@${sc.branch}`;
  },

  // A search box that calls ``onFilter(text)`` as the user types; the
  // text is kept in the page's ?filter= so the view can be linked.
  filterBox(label, onFilter) {
    const params = new URLSearchParams(location.search);
    const input = zuul.el('input', {type: 'search', id: 'filter', 'aria-label': label,
      placeholder: label, value: params.get('filter') || ''});
    input.addEventListener('input', () => {
      const p = new URLSearchParams(location.search);
      if (input.value) p.set('filter', input.value); else p.delete('filter');
      history.replaceState(null, '', p.toString() ? `?${p}` : location.pathname);
      onFilter(input.value.trim().toLowerCase());
    });
    return input;
  },

  // With a stored token, login.js checks it first (and drops a refused
  // one): the page waits for that, so it asks with the right token and
  // makes one request at a time.
  authChecked() {
    if (!zuul.token() || document.body.dataset.auth) return Promise.resolve();
    return new Promise((resolve) => {
      document.addEventListener('zuul-auth', resolve, {once: true});
      setTimeout(resolve, 10000);
    });
  },

  // Render a page: ``render()`` returns its nodes; errors are shown.
  async load(title, render) {
    try {
      await zuulConfig.authChecked();
      const nodes = [await render()].flat(Infinity);
      zuul.show(zuul.el('h1', {}, title), nodes);
      document.body.dataset.loaded = 'yes';
    } catch (e) {
      zuul.show(zuul.el('h1', {}, title), zuul.error(e.message));
      document.body.dataset.loaded = 'error';
    }
  },

  empty(text) {
    return zuul.el('p', {class: 'empty'}, text);
  },
};

// Escape closes the Config menu and puts the focus back on it.
document.addEventListener('keydown', (event) => {
  const menu = document.getElementById('nav-config');
  if (event.key === 'Escape' && menu && menu.open) {
    menu.open = false;
    menu.querySelector('summary').focus();
  }
});
