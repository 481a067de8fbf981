// The operators' status page: renders GET /v1/admin/status, refreshes a connection (POST
// /v1/admin/connections/{id}/refresh) and toggles capabilities through the preferences endpoint.
// Every string from the agent or an upstream becomes text (textContent, createElement), never
// markup. The token stays in this tab's sessionStorage.
'use strict';
(() => {
  const TOKEN_KEY = 'quiver.operator_token';
  const POLL_MS = 5000;
  const LISTS = [['tools', 'tools'], ['resources', 'resources'],
    ['resource_templates', 'templates'], ['prompts', 'prompts']];
  const $ = (id) => document.getElementById(id);
  const open = new Set();         // connections whose capability list is open
  const capabilities = new Map(); // connection id -> {rows} or {error}
  let timer = null;

  // An element with properties and children (nodes, or strings that become text nodes).
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === 'dataset') Object.assign(e.dataset, v);
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e[k] = v;
    }
    for (const c of children) {
      if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

  async function call(method, path, body) {
    const headers = { Authorization: 'Bearer ' + token() };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(path, {
      method, headers, cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let data = null;
    try { data = await res.json(); } catch (_) { /* not JSON */ }
    if (!res.ok) {
      const e = new Error((data && data.error && data.error.message) || 'HTTP ' + res.status);
      e.status = res.status;
      throw e;
    }
    return data;
  }

  function say(text) {
    $('message').textContent = text;
    $('message').hidden = !text;
  }

  function duration(ms) {
    if (ms === null || ms === undefined) return '–';
    if (ms < 1000) return ms + ' ms';
    const s = Math.round(ms / 1000);
    if (s < 120) return s + ' s';
    if (s < 7200) return Math.round(s / 60) + ' min';
    if (s < 172800) return Math.round(s / 3600) + ' h';
    return Math.round(s / 86400) + ' d';
  }

  function counts(p) {
    const parts = [];
    for (const [list, label] of LISTS) {
      const l = p.lists && p.lists[list];
      if (!l) continue;
      if (l.state === 'ok') parts.push(l.count + ' ' + label);
      else parts.push(label + ': ' + (l.kept ? 'kept (last listing failed)' : 'could not be loaded'));
    }
    if (p.capabilities) {
      parts.push(p.capabilities.enabled + ' of ' + p.capabilities.total + ' enabled');
    }
    return parts.join(' · ');
  }

  function lastListing(l) {
    const td = el('td', { className: 'last-listing' });
    if (!l || !l.at) {
      td.append('never');
      return td;
    }
    td.dataset.at = String(l.at);
    td.append(new Date(l.at).toLocaleString());
    td.append(el('div', { className: 'sub' },
      l.duration_ms === null ? 'duration unknown (' + l.source + ')' : 'took ' + duration(l.duration_ms)));
    return td;
  }

  function capabilityRow(conn, columns) {
    const summary = el('summary', {}, 'Capabilities');
    if (conn.capabilities_enabled !== null && conn.capabilities_enabled !== undefined) {
      summary.append(' (' + conn.capabilities_enabled + ' enabled)');
    }
    const details = el('details', { open: open.has(conn.id), dataset: { connection: conn.id } },
      summary);
    details.addEventListener('toggle', () => {
      if (details.open) { open.add(conn.id); loadCapabilities(conn.id); } else open.delete(conn.id);
    });
    const cached = capabilities.get(conn.id);
    if (conn.credential_mode === 'per_member') {
      details.append(el('p', { className: 'hint' },
        'A per-member connection: these are your own choices; each member toggles their own.'));
    }
    if (cached && cached.error) details.append(el('p', { className: 'error' }, cached.error));
    if (cached && cached.rows) {
      const list = el('ul', { className: 'capabilities' });
      for (const row of cached.rows) {
        const box = el('input', { type: 'checkbox', checked: row.enabled });
        box.dataset.type = row.type;
        box.dataset.key = row.key;
        box.addEventListener('change', () => toggle(conn.id, row, box));
        list.append(el('li', {}, el('label', {}, box, ' ' + row.type + ' ',
          el('span', { className: 'key' }, row.key))));
      }
      if (!cached.rows.length) list.append(el('li', { className: 'hint' }, 'none listed yet'));
      details.append(list);
    }
    return el('tr', { className: 'caps', dataset: { connection: conn.id } },
      el('td', { colSpan: columns }, details));
  }

  async function loadCapabilities(id) {
    try {
      const r = await call('GET', '/v1/mcp-connections/' + encodeURIComponent(id) + '/preferences');
      capabilities.set(id, { rows: r.preferences });
    } catch (e) {
      capabilities.set(id, { error: e.status === 404
        ? 'This connection is not granted to you: grant it to toggle its capabilities.'
        : 'Capabilities unavailable: ' + e.message });
    }
    await load();
  }

  async function toggle(id, row, box) {
    box.disabled = true;
    try {
      const r = await call('PATCH', '/v1/mcp-connections/' + encodeURIComponent(id) + '/preferences',
        { type: row.type, key: row.key, enabled: box.checked });
      capabilities.set(id, { rows: r.preferences });
      say('');
    } catch (e) {
      say('Toggling ' + row.type + ' ' + row.key + ' failed: ' + e.message);
    }
    await load();
  }

  async function refresh(id, button) {
    button.disabled = true;
    try {
      const r = await call('POST', '/v1/admin/connections/' + encodeURIComponent(id) + '/refresh');
      const states = (r.refreshes || []).map((x) => x.status);
      say('');
      $('updated').textContent = 'Refresh of ' + id + ': ' + (states.join(', ') || 'nothing to do');
    } catch (e) {
      say('Refresh of ' + id + ' failed: ' + e.message);
    }
    await load();
  }

  function render(status) {
    const body = $('connections').tBodies[0];
    const columns = $('connections').tHead.rows[0].cells.length;
    const rows = [];
    for (const conn of status.connections) {
      const principals = conn.principals.length ? conn.principals
        : [{ principal: '–', status: 'pending', pending_reason: 'no granted member' }];
      principals.forEach((p, i) => {
        const tr = el('tr', { className: 'conn', dataset: { connection: conn.id, principal: p.principal } });
        tr.append(el('td', { className: 'name' }, conn.name,
          el('div', { className: 'sub' }, conn.transport + ', ' + conn.credential_mode)));
        tr.append(el('td', { className: 'principal' }, p.principal));
        const badge = el('span', { className: 'badge status-' + p.status }, p.status);
        const st = el('td', { className: 'status' }, badge);
        if (p.pending_reason) st.append(el('div', { className: 'sub' }, p.pending_reason));
        // authorization_required: someone must connect (a member: POST this path with their
        // token; a shared connection: an operator, or `quiver-agent login`).
        if (p.authorize) st.append(el('div', { className: 'sub authorize' }, 'to connect: POST ' + p.authorize));
        if (p.refresh_in_flight) st.append(el('div', { className: 'sub' }, 'refreshing…'));
        tr.append(st);
        tr.append(el('td', { className: 'age' }, duration(p.age_ms)));
        tr.append(el('td', { className: 'counts' }, counts(p)));
        tr.append(el('td', { className: 'error' },
          p.error ? p.error.code + ': ' + p.error.message : ''));
        tr.append(lastListing(p.last_listing));
        tr.append(el('td', { className: 'members' }, i ? '' : conn.members.join(', ') +
          (conn.members_total > conn.members.length ? ' … (' + conn.members_total + ')' : '')));
        const actions = el('td', { className: 'actions' });
        if (i === 0) {
          const b = el('button', { type: 'button', className: 'refresh', textContent: 'Refresh' });
          b.addEventListener('click', () => refresh(conn.id, b));
          actions.append(b);
        }
        tr.append(actions);
        rows.push(tr);
      });
      if (conn.principals_truncated) {
        rows.push(el('tr', {}, el('td', { colSpan: columns, className: 'hint' },
          conn.principals.length + ' of ' + conn.principals_total + ' principals shown')));
      }
      rows.push(capabilityRow(conn, columns));
    }
    body.replaceChildren(...rows);

    const members = $('members').tBodies[0];
    members.replaceChildren(...status.members.map((m) => el('tr', { dataset: { member: m.id } },
      el('td', {}, m.id), el('td', {}, m.operator ? 'operator' : 'member'),
      el('td', {}, m.connections.join(', ')))));
    const cut = $('members-truncated');
    cut.hidden = !status.members_truncated;
    cut.textContent = status.members_truncated
      ? status.members.length + ' of ' + status.members_total + ' members shown' : '';
    $('updated').dataset.generatedAt = String(status.generated_at);
    if (!$('updated').textContent.startsWith('Refresh')) {
      $('updated').textContent = 'namespace ' + status.namespace + ', updated ' +
        new Date(status.generated_at).toLocaleTimeString();
    }
  }

  let loading = null;
  async function load() {
    if (!token()) return;
    if (loading) return loading;
    loading = (async () => {
      try {
        render(await call('GET', '/v1/admin/status'));
        say('');
        $('view').hidden = false;
        $('login').hidden = true;
        $('forget').hidden = false;
      } catch (e) {
        if (e.status === 401 || e.status === 403) {
          stop();
          $('view').hidden = true;
          $('login').hidden = false;
          $('forget').hidden = false;
          say(e.status === 403
            ? 'Forbidden: this token is not an operator\'s (' + e.message + ').'
            : 'The token was refused: ' + e.message);
        } else {
          say('Status unavailable: ' + e.message);
        }
      } finally {
        loading = null;
      }
    })();
    return loading;
  }

  function stop() {
    if (timer) clearInterval(timer);
    timer = null;
  }

  function start() {
    stop();
    timer = setInterval(load, POLL_MS);
    return load();
  }

  $('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
    $('token').value = '';
    start();
  });
  $('forget').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    stop();
    capabilities.clear();
    $('view').hidden = true;
    $('login').hidden = false;
    $('forget').hidden = true;
    say('');
  });
  if (token()) start();
})();
