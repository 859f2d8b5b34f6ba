'use strict';
// "Log in" in the top bar: an admin pastes a JWT (made by
// `zuul-admin create-auth-token` or their identity provider). It is kept
// in sessionStorage (this tab only, gone when the tab closes), sent as
// "Authorization: Bearer" with every API call (common.js), and checked
// against /api/tenant/<t>/authorizations. zuul.auth is then
// {user, admin}; a 'zuul-auth' event on document tells the page.

zuul.auth = null;

// The token's claims, for showing who is logged in (the server checks
// the signature; this only reads).
function tokenClaims(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(part.padEnd(part.length + (4 - part.length % 4) % 4, '=')));
  } catch (e) {
    return {};
  }
}

function setAuth(auth) {
  zuul.auth = auth;
  document.body.dataset.auth = auth ? (auth.admin ? 'admin' : 'user') : 'anonymous';
  document.dispatchEvent(new CustomEvent('zuul-auth', {detail: auth}));
  renderLogin();
}

function logOut() {
  sessionStorage.removeItem(zuul.TOKEN_KEY);
  setAuth(null);
  document.getElementById('login-button').focus();
}

// Ask the server what the stored token may do; a token it refuses is
// dropped and the reason shown.
async function checkToken() {
  try {
    const answer = await zuul.getJSON(zuul.api('authorizations'));
    const claims = tokenClaims(zuul.token());
    setAuth({user: claims.preferred_username || claims.sub || 'unknown',
             admin: Boolean(answer.zuul && answer.zuul.admin)});
    return null;
  } catch (e) {
    sessionStorage.removeItem(zuul.TOKEN_KEY);
    setAuth(null);
    return `Login refused (${e.status || 'error'}): ${e.message}`;
  }
}

function loginForm(message) {
  const input = zuul.el('textarea', {id: 'login-token', rows: '3', required: 'required',
    spellcheck: 'false', autocomplete: 'off', 'aria-describedby': 'login-help'});
  const form = zuul.el('form', {id: 'login-form', class: 'login-form',
                                'aria-label': 'Log in with a token'},
    zuul.el('label', {for: 'login-token'}, 'Token (JWT)'),
    input,
    zuul.el('p', {id: 'login-help', class: 'help'},
      'Kept in this browser tab only, until you log out or close the tab.'),
    message ? zuul.el('p', {class: 'error', id: 'login-error', role: 'alert'}, message) : null,
    zuul.el('div', {class: 'buttons'},
      zuul.el('button', {type: 'submit', id: 'login-submit'}, 'Log in'),
      zuul.el('button', {type: 'button', id: 'login-cancel'}, 'Cancel')));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    // what create-auth-token prints starts with "Bearer "; take either
    const token = input.value.trim().replace(/^Bearer\s+/i, '');
    if (!token) return;
    sessionStorage.setItem(zuul.TOKEN_KEY, token);
    const error = await checkToken();
    if (error) renderLogin(true, error);
    else document.getElementById('logout-button').focus();
  });
  const cancel = () => {
    renderLogin(false);
    document.getElementById('login-button').focus();
  };
  form.querySelector('#login-cancel').addEventListener('click', cancel);
  form.addEventListener('keydown', (event) => { if (event.key === 'Escape') cancel(); });
  return form;
}

function renderLogin(open, message) {
  const box = document.getElementById('login');
  if (!box) return;
  if (zuul.auth) {
    const role = zuul.auth.admin ? 'admin' : 'no admin rights on this tenant';
    const button = zuul.el('button', {type: 'button', id: 'logout-button'}, 'Log out');
    button.addEventListener('click', logOut);
    box.replaceChildren(zuul.el('span', {id: 'login-user'},
      `Logged in as ${zuul.auth.user} (${role})`), button);
    return;
  }
  const button = zuul.el('button', {type: 'button', id: 'login-button',
    'aria-expanded': open ? 'true' : 'false', 'aria-controls': 'login-form'}, 'Log in');
  button.addEventListener('click', () => {
    renderLogin(!open);
    if (!open) document.getElementById('login-token').focus();
  });
  box.replaceChildren(...[button, open ? loginForm(message) : null].filter((n) => n));
}

if (zuul.tenant) {
  if (zuul.token()) {
    checkToken().then((error) => { if (error) renderLogin(true, error); });
  } else {
    setAuth(null);
  }
}
