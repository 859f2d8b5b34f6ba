// Shared helpers for the zuul-web pages (plain JS, no build step).
'use strict';

const zuul = {
  tenant: document.body.dataset.tenant,
  arg: document.body.dataset.arg,

  // Build a DOM element: el('div', {class: 'x'}, child, 'text', ...).
  // A link attribute whose URL is not http(s) or relative is left out.
  el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === 'class') node.className = value;
      else if (key === 'style') node.setAttribute('style', value);
      else if (zuul.URL_ATTRIBUTES.has(key.toLowerCase())) {
        if (zuul.safeUrl(value) !== null) node.setAttribute(key, value);
      } else node.setAttribute(key, value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  },

  URL_ATTRIBUTES: new Set(['href', 'src', 'action', 'formaction', 'xlink:href', 'srcset']),

  // The URL if a browser would open it as an http(s) or relative link,
  // else null: links come from jobs (zuul_return), and a javascript: or
  // data: one would run in this page. As browsers do before reading the
  // scheme: tabs and newlines removed, leading controls and spaces ignored.
  safeUrl(value) {
    const text = String(value);
    const seen = text.replace(/[\t\n\r]/g, '').replace(/^[\x00-\x20]+/, '');
    if (/[\x00-\x1f\x7f]/.test(seen)) return null;
    const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(seen);
    if (scheme && !['http', 'https'].includes(scheme[1].toLowerCase())) return null;
    return text;
  },

  // The admin token pasted at "Log in" (login.js), for this tab only.
  TOKEN_KEY: 'zuul.token',

  token() {
    return sessionStorage.getItem(zuul.TOKEN_KEY);
  },

  // fetch() with the token, if any; the answer's JSON, or an Error with
  // the server's message and the HTTP status (error.status).
  async request(method, path, body) {
    const headers = {};
    const token = zuul.token();
    if (token) headers.Authorization = `Bearer ${token}`;
    const init = {method, headers, cache: 'no-store'};
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    const text = await response.text();
    let value = null;
    try { value = text ? JSON.parse(text) : null; } catch (e) { value = null; }
    if (!response.ok) {
      const error = new Error((value && value.error) || response.statusText);
      error.status = response.status;
      throw error;
    }
    return value;
  },

  getJSON(path) {
    return zuul.request('GET', path);
  },

  api(path) {
    return '/api/tenant/' + encodeURIComponent(zuul.tenant) + '/' + path;
  },

  // "1h 02m", "3m 05s", "12s" from milliseconds.
  duration(ms) {
    if (ms === null || ms === undefined) return '';
    let s = Math.max(0, Math.round(ms / 1000));
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    const pad = (n) => String(n).padStart(2, '0');
    if (h) return `${h}h ${pad(m)}m`;
    if (m) return `${m}m ${pad(s)}s`;
    return `${s}s`;
  },

  show(...nodes) {
    const main = document.getElementById('main');
    main.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined));
  },

  error(message) {
    return zuul.el('p', {class: 'error', id: 'error'}, message);
  },
};
