// kiln's dashboard: one page over kiln serve's JSON APIs (docs/dashboard.md).
// Every piece of data reaches the page through textContent or an attribute
// set by the DOM, never as HTML; the token lives in sessionStorage and goes
// out only as an Authorization header.
'use strict';

const KEY = 'kiln-token';
const $ = (id) => document.getElementById(id);
let me = null; // GET /kiln/v1/whoami
let stopView = () => {}; // ends the current view's streams and timers

// el('td', {class: 'num'}, 'text', child, ...): text children become text nodes.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'on') for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

// What a log line or name holds, as text: control characters (ANSI's ESC
// included) shown as their Unicode pictures, not interpreted.
function printable(s) {
  return String(s).replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g,
    (c) => c === '\u007f' ? '\u2421' : String.fromCharCode(0x2400 + c.charCodeAt(0)));
}

function bytes(n) {
  if (n === undefined || n === null) return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0, v = Number(n);
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : String(v)) + ' ' + u[i];
}

function when(sec) {
  if (!sec) return '';
  return new Date(sec * 1000).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function span(sec) {
  if (sec === undefined || sec === null || isNaN(sec)) return '';
  sec = Math.max(0, Math.round(sec));
  if (sec < 60) return sec + ' s';
  if (sec < 3600) return Math.floor(sec / 60) + ' min ' + (sec % 60) + ' s';
  return Math.floor(sec / 3600) + ' h ' + Math.floor((sec % 3600) / 60) + ' min';
}

const short = (d) => (d || '').replace(/^sha256:/, '').slice(0, 12);

class HttpError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

async function api(path, opts = {}) {
  const headers = Object.assign({}, opts.headers || {});
  const tok = sessionStorage.getItem(KEY);
  if (tok) headers.Authorization = 'Bearer ' + tok;
  if (opts.json !== undefined) {
    headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(opts.json);
  }
  const res = await fetch(path, { method: opts.method || 'GET', headers, body: opts.body,
    signal: opts.signal, credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer' });
  if (opts.raw) return res;
  const text = await res.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = null; }
  if (!res.ok) {
    const msg = (body && (body.error || body.message ||
      (body.errors && body.errors[0] && body.errors[0].message))) || res.statusText;
    throw new HttpError(res.status, msg);
  }
  return body;
}

function show(...nodes) {
  const v = $('view');
  v.replaceChildren(...nodes);
}

function failure(e) {
  if (e instanceof HttpError && e.status === 401) { logout(); return; }
  show(el('p', { class: 'error', role: 'alert' }, 'Error: ' + (e && e.message ? e.message : String(e))));
}

// ---- login -------------------------------------------------------------

async function login(token) {
  if (token !== undefined) sessionStorage.setItem(KEY, token);
  try {
    me = await api('/kiln/v1/whoami');
  } catch (e) {
    sessionStorage.removeItem(KEY);
    me = null;
    return e instanceof HttpError && e.status === 401 ? 'the token was refused' : String(e.message || e);
  }
  return null;
}

function logout() {
  stopView();
  sessionStorage.removeItem(KEY);
  sessionStorage.removeItem(TEAM_KEY);
  me = null;
  $('nav').hidden = true;
  $('team-pick').hidden = true;
  $('logout').hidden = true;
  $('who').textContent = '';
  $('view').replaceChildren();
  $('login').hidden = false;
  $('token').focus();
}

function teams(kind) {
  // The namespaces the token holds for an action; auth off: every team ("*").
  return me && me.namespaces ? me.namespaces[kind] || [] : [];
}

// The teams the token names (the first component of its namespaces, for
// any action); none when it holds every team ("*", or auth off).
function myTeams() {
  const all = new Set();
  for (const kind of ['pull', 'build', 'sandbox'])
    for (const n of teams(kind)) if (n !== '*') all.add(n.split('/')[0]);
  return [...all].sort();
}

// The team the pages show: with a token for several teams, the one picked
// in the header (kept in this tab's sessionStorage, like the token).
const TEAM_KEY = 'kiln-team';
function team() {
  const t = myTeams();
  if (t.length < 2) return null;
  const picked = sessionStorage.getItem(TEAM_KEY);
  return t.includes(picked) ? picked : t[0];
}

// The ?team= a call names: the picked team, none with one team (the
// service takes it) or every team.
function teamArg() {
  const t = team();
  return t ? 'team=' + encodeURIComponent(t) : '';
}

function teamPicker() {
  const t = myTeams(), sel = $('team');
  $('team-pick').hidden = t.length < 2;
  sel.replaceChildren(...t.map((n) => el('option', { value: n, selected: n === team() }, n)));
}

// ---- templates and images ----------------------------------------------

async function viewTemplates() {
  const started = performance.now();
  const q = teamArg();
  const data = await api('/kiln/v1/repos' + (q ? '?' + q : ''));
  const out = [el('h1', {}, 'Templates and images')];
  if (!data.repositories.length) out.push(el('p', { class: 'muted' }, 'No repository yet: push one with kiln push.'));
  for (const repo of data.repositories) {
    out.push(el('h2', { id: 'repo-' + repo.name, 'data-repo': repo.name }, repo.name));
    out.push(el('p', { class: 'muted' },
      `${repo.tags.length} tags; stored ${bytes(repo.stored)} after deduplication, ` +
      `${bytes(repo.logical)} referenced by its tags` + (repo.public ? '; public' : '')));
    const body = el('tbody');
    const frag = document.createDocumentFragment();
    for (const t of repo.tags) frag.append(tagRow(repo, t));
    body.append(frag);
    out.push(el('table', { class: 'tags' },
      el('thead', {}, el('tr', {}, el('th', {}, 'tag'), el('th', {}, 'digest'), el('th', {}, 'created'),
        el('th', { class: 'num' }, 'size'), el('th', { class: 'num' }, 'new (after dedup)'),
        el('th', {}, 'kind'), el('th', {}, 'build'), el('th', {}, 'signed'), el('th', {}, ''))),
      body));
  }
  show(...out);
  document.body.dataset.paintMs = String(Math.round(performance.now() - started));
}

function tagRow(repo, t) {
  const kind = t.artifact_type === 'application/vnd.kiln.template.v1' ? 'template' : 'image';
  const hist = '#/history/' + encodeURIComponent(repo.name) + '/' + encodeURIComponent(t.tag);
  return el('tr', { 'data-tag': t.tag },
    el('td', {}, el('a', { href: hist, class: 'tag' }, t.tag)),
    el('td', { class: 'mono', title: t.digest }, short(t.digest)),
    el('td', { title: 'tagged ' + when(t.updated) }, when(t.created)),
    el('td', { class: 'num size' }, bytes(t.size)),
    el('td', { class: 'num' }, bytes(t.new_bytes)),
    el('td', {}, kind),
    el('td', {}, t.build ? el('a', { href: '#/build/' + encodeURIComponent(t.build.replace(/^build /, '')) },
      t.build.replace(/^build /, '')) : ''),
    el('td', {}, t.signed ? 'signed' : ''),
    el('td', {}, t.attestation ? el('button', { type: 'button', class: 'secondary', 'aria-expanded': 'false',
      on: { click: (ev) => provenance(ev.target, repo.name, t.attestation) } }, 'provenance') : ''));
}

// The build's signed provenance (the .att tag's DSSE layer), read over the
// distribution API: builder, Dockerfile, context, base images, times.  The
// page shows what the statement says; verifying it is kiln pull's and
// kiln inspect --provenance's (docs/security.md).
async function provenance(button, repo, att) {
  // shown in a row of its own under the tag's, the table's whole width
  const row = button.closest('tr');
  const next = row.nextElementSibling;
  if (next && next.classList.contains('provenance')) {
    next.remove();
    button.setAttribute('aria-expanded', 'false');
    return;
  }
  const cell = el('td', { colspan: row.children.length });
  row.after(el('tr', { class: 'provenance' }, cell));
  button.setAttribute('aria-expanded', 'true');
  try {
    const m = await api(`/v2/${repo}/manifests/${att}`,
      { headers: { Accept: 'application/vnd.oci.image.manifest.v1+json' } });
    const layer = (m.layers || [])[0];
    const env = await api(`/v2/${repo}/blobs/${layer.digest}`);
    const st = JSON.parse(new TextDecoder().decode(Uint8Array.from(atob(env.payload), (c) => c.charCodeAt(0))));
    const p = st.predicate || {};
    const bd = p.buildDefinition || {}, rd = p.runDetails || {}, ext = bd.externalParameters || {};
    const dig = (o) => { const d = (o || {}).digest || {}; const k = Object.keys(d)[0]; return k ? `${k}:${d[k]}` : ''; };
    const deps = (bd.resolvedDependencies || []).map((d) => `${d.uri} ${dig(d)}`);
    const kv = [['builder', (rd.builder || {}).id || ''], ['Dockerfile', dig(ext.dockerfile)], ['context', dig(ext.context)],
      ['base images', deps.length ? deps : ['none (FROM scratch)']], ['started', (rd.metadata || {}).startedOn || ''],
      ['finished', (rd.metadata || {}).finishedOn || ''], ['key id', ((env.signatures || [])[0] || {}).keyid || '']];
    cell.replaceChildren(el('dl', { class: 'kv provenance', 'aria-label': 'provenance' },
      kv.flatMap(([k, v]) => [el('dt', {}, k), el('dd', { class: 'mono', 'data-key': k },
        [v].flat().map((x) => el('div', {}, printable(x))))])));
  } catch (e) {
    cell.replaceChildren(el('span', { class: 'error' }, 'provenance: ' + e.message));
  }
}

async function viewHistory(repo, tag) {
  const h = await api(`/kiln/v1/history?repo=${encodeURIComponent(repo)}&tag=${encodeURIComponent(tag)}`);
  const rows = h.history.slice().reverse().map((c) => el('tr', {},
    el('td', {}, when(c.at)),
    el('td', { class: 'mono', title: c.digest || '' }, c.digest ? short(c.digest) : '(deleted)'),
    el('td', {}, c.build ? c.build.replace(/^build /, '') : ''),
    el('td', { class: 'num' }, c.digest ? String(c.new_blobs) : ''),
    el('td', { class: 'num' }, c.digest ? bytes(c.new_bytes) : ''),
    el('td', { class: 'num' }, c.digest ? (c.first ? '—' : String(c.shared_blobs)) : ''),
    el('td', { class: 'num' }, c.digest ? (c.first ? '—' : bytes(c.shared_bytes)) : '')));
  show(el('h1', {}, `${repo}:${tag}`), el('p', {}, el('a', { href: '#/templates' }, 'All templates')),
    el('h2', {}, 'History (newest first), chunks against the version before'),
    el('table', { class: 'history' },
      el('thead', {}, el('tr', {}, el('th', {}, 'when'), el('th', {}, 'digest'), el('th', {}, 'build'),
        el('th', { class: 'num' }, 'new chunks'), el('th', { class: 'num' }, 'new bytes'),
        el('th', { class: 'num' }, 'shared chunks'), el('th', { class: 'num' }, 'shared bytes'))),
      el('tbody', {}, rows)));
}

// ---- builds --------------------------------------------------------------

function duration(b) {
  if (!b.started) return '';
  return span((b.ended || Date.now() / 1000) - b.started);
}

async function viewBuilds() {
  if (!me.build) { show(el('h1', {}, 'Builds'), el('p', { class: 'muted' }, 'This server runs no build service (kiln serve --build).')); return; }
  const q = teamArg();
  const data = await api('/build/v1/builds' + (q ? '?' + q : ''));
  const groups = { queued: [], building: [], finished: [] };
  for (const b of data.builds) (groups[b.state] || groups.finished).push(b);
  const table = (list) => el('table', { class: 'builds' },
    el('thead', {}, el('tr', {}, el('th', {}, 'build'), el('th', {}, 'name'), el('th', {}, 'state'),
      el('th', {}, 'step'), el('th', {}, 'created'), el('th', { class: 'num' }, 'duration'), el('th', {}, 'failed at'))),
    el('tbody', {}, list.map((b) => el('tr', { 'data-build': b.id, class: b.state === 'failed' ? 'failed' : null },
      el('td', {}, el('a', { href: '#/build/' + encodeURIComponent(b.id) }, b.id)),
      el('td', {}, b.name || ''),
      el('td', { class: 'state-' + b.state }, b.state),
      el('td', {}, b.total ? `${b.step}/${b.total}` : ''),
      el('td', {}, when(b.created)),
      el('td', { class: 'num' }, duration(b)),
      el('td', { class: 'mono' }, b.location || '')))));
  show(el('h1', {}, 'Builds'),
    el('h2', {}, `Queue (${groups.queued.length})`), table(groups.queued),
    el('h2', {}, `Running (${groups.building.length})`), table(groups.building),
    el('h2', {}, `Finished (${groups.finished.length})`), table(groups.finished));
  const t = setTimeout(() => { if (location.hash.startsWith('#/builds')) route(); }, 5000);
  stopView = () => clearTimeout(t);
}

async function viewBuild(id) {
  const q = teamArg();
  const base = '/build/v1/builds/' + encodeURIComponent(id);
  let st = await api(base + (q ? '?' + q : ''));
  const head = el('dl', { class: 'kv', id: 'build-status' });
  const fail = el('div', { id: 'build-failure', role: 'alert' });
  const steps = el('tbody');
  const log = el('pre', { class: 'log', id: 'build-log', tabindex: '0', 'aria-label': 'build log' });
  const status = el('p', { id: 'log-state', class: 'muted' });
  const stepRows = new Map();
  show(el('h1', {}, 'Build ' + id), el('p', {}, el('a', { href: '#/builds' }, 'All builds')), head, fail,
    el('h2', {}, 'Steps'),
    el('table', { class: 'steps' }, el('thead', {}, el('tr', {}, el('th', {}, 'step'), el('th', {}, 'instruction'),
      el('th', {}, 'cache'), el('th', { class: 'num' }, 'seconds'))), steps),
    el('h2', {}, 'Log'), status, log);

  const paint = () => {
    head.replaceChildren(
      el('dt', {}, 'state'), el('dd', { class: 'state-' + st.state, id: 'build-state' }, st.state),
      el('dt', {}, 'name'), el('dd', {}, st.name || ''),
      el('dt', {}, 'step'), el('dd', {}, st.total ? `${st.step}/${st.total}` : ''),
      el('dt', {}, 'created'), el('dd', {}, when(st.created)),
      el('dt', {}, 'duration'), el('dd', {}, duration(st)),
      el('dt', {}, 'image'), el('dd', { class: 'mono' }, st.image ? `${st.image} ${st.image_digest || ''}` : ''),
      el('dt', {}, 'template'), el('dd', { class: 'mono' }, st.template_ref ? `${st.template_ref} ${st.template_digest || ''}` : ''));
    if (st.state === 'failed') {
      fail.className = 'failure';
      fail.replaceChildren(el('strong', {}, 'Failed at step ' + st.step + (st.location ? ' — ' : '')),
        el('span', { class: 'mono', id: 'fail-location' }, st.location || ''),
        el('div', { class: 'mono' }, st.instruction || ''), el('div', {}, st.reason || ''));
      const row = stepRows.get(st.step);
      if (row) row.classList.add('failed');
    }
  };
  const stepRow = (ev) => {
    let row = stepRows.get(ev.step);
    if (!row) {
      row = el('tr', { 'data-step': ev.step }, el('td', {}, `${ev.step}/${ev.total}`), el('td', { class: 'mono' }),
        el('td', {}), el('td', { class: 'num' }));
      stepRows.set(ev.step, row);
      steps.append(row);
    }
    return row;
  };
  paint();

  // The log: its cursor is the count of lines read; a cut stream resumes
  // from there.  Lines are put on the page once per frame.
  const ctl = new AbortController();
  let cursor = 0, pending = [], frame = 0, lines = 0, chars = 0, done = false;
  const MAX = 8 << 20;
  const flush = () => {
    frame = 0;
    if (!pending.length) return;
    const stick = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    const text = pending.join('');
    pending = [];
    log.append(document.createTextNode(text));
    chars += text.length;
    // a log past MAX characters keeps its end on the page (the whole is in the API)
    while (chars > MAX && log.firstChild) { chars -= log.firstChild.length; log.firstChild.remove(); }
    if (stick) log.scrollTop = log.scrollHeight;
    log.dataset.lines = String(lines);
  };
  const emit = (s) => { pending.push(printable(s).replace(/\u240a/g, '\n')); lines++; if (!frame) frame = requestAnimationFrame(flush); };
  const onEvent = (ev) => {
    switch (ev.event) {
      case 'step': stepRow(ev).children[1].textContent = printable(ev.instruction || ''); emit(`[${ev.step}/${ev.total}] ${ev.instruction || ''}\n`); break;
      case 'step_done': {
        const r = stepRow(ev);
        r.children[2].textContent = ev.cache || '';
        r.children[3].textContent = ev.seconds !== undefined ? Number(ev.seconds).toFixed(2) : '';
        break;
      }
      case 'output': emit(ev.data || ''); break;
      case 'error': emit('error: ' + (ev.message || '') + '\n'); break;
      case 'done': emit(`built ${ev.digest || ''}${ev.template ? ', template ' + ev.template : ''}\n`); break;
      case 'status':
        if (ev.state) st = Object.assign({}, st, ev);
        if (ev.message) emit(ev.message + '\n');
        break;
      default: if (ev.message) emit(ev.message + '\n');
    }
  };
  stopView = () => { ctl.abort(); if (frame) cancelAnimationFrame(frame); };
  const follow = async () => {
    for (let tries = 0; tries < 50 && !ctl.signal.aborted; tries++) {
      status.textContent = st.state === 'queued' || st.state === 'building' ? 'following the log live…' : 'log';
      try {
        const res = await api(`${base}/logs?cursor=${cursor}&follow=1${q ? '&' + q : ''}`, { raw: true, signal: ctl.signal });
        if (!res.ok) throw new HttpError(res.status, res.statusText);
        const reader = res.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        for (;;) {
          const { value, done: end } = await reader.read();
          if (end) break;
          buf += dec.decode(value, { stream: true });
          let nl;
          while ((nl = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, nl);
            buf = buf.slice(nl + 1);
            if (!line.trim()) continue; // keep-alive
            cursor++;
            let ev;
            try { ev = JSON.parse(line); } catch { emit(line + '\n'); continue; }
            onEvent(ev);
          }
        }
        st = await api(base + (q ? '?' + q : ''), { signal: ctl.signal });
        if (st.state !== 'queued' && st.state !== 'building') { done = true; break; }
      } catch (e) {
        if (ctl.signal.aborted) return;
        if (e instanceof HttpError && e.status < 500) { status.textContent = 'log: ' + e.message; return; }
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
    flush();
    paint();
    status.textContent = done ? `log complete (${lines} lines), build ${st.state}` : 'log: gave up reconnecting';
    status.dataset.done = done ? '1' : '0';
  };
  follow();
}

// ---- sandboxes -------------------------------------------------------------

async function viewSandboxes() {
  if (!me.sandboxes) { show(el('h1', {}, 'Sandboxes'), el('p', { class: 'muted' }, 'This server runs no sandbox service (kiln serve --sandboxes).')); return; }
  const q = teamArg();
  const list = await api('/v2/sandboxes' + (q ? '?' + q : ''));
  const now = Date.now();
  const act = async (ev, method, path, json) => {
    ev.target.disabled = true;
    try { await api(path + (q ? '?' + q : ''), { method, json }); route(); } catch (e) { failure(e); }
  };
  const rows = (list || []).map((s) => {
    const left = s.endAt ? (Date.parse(s.endAt) - now) / 1000 : null;
    const id = encodeURIComponent(s.sandboxID);
    return el('tr', { 'data-sandbox': s.sandboxID },
      el('td', { class: 'mono' }, s.sandboxID),
      el('td', {}, s.templateID),
      el('td', { class: 'state-' + s.state }, s.state),
      el('td', { class: 'num' }, span((now - Date.parse(s.startedAt)) / 1000)),
      el('td', { class: 'num' }, left === null ? '' : span(left)),
      el('td', { class: 'num' }, s.memoryMB + ' MiB'),
      el('td', {}, el('div', { class: 'row' },
        el('button', { type: 'button', class: 'extend', 'aria-label': 'Extend ' + s.sandboxID + ' by 5 minutes',
          on: { click: (ev) => act(ev, 'POST', `/sandboxes/${id}/timeout`, { timeout: Math.max(0, Math.round(left || 0)) + 300 }) } }, '+5 min'),
        el('button', { type: 'button', class: 'kill', 'aria-label': 'Kill ' + s.sandboxID,
          on: { click: (ev) => act(ev, 'DELETE', `/sandboxes/${id}`) } }, 'Kill'))));
  });
  show(el('h1', {}, 'Sandboxes on this host'),
    el('table', { class: 'sandboxes' },
      el('thead', {}, el('tr', {}, el('th', {}, 'sandbox'), el('th', {}, 'template'), el('th', {}, 'state'),
        el('th', { class: 'num' }, 'age'), el('th', { class: 'num' }, 'time left'), el('th', { class: 'num' }, 'memory'),
        el('th', {}, 'actions'))),
      el('tbody', {}, rows)),
    rows.length ? '' : el('p', { class: 'muted', id: 'no-sandboxes' }, 'No sandbox runs.'));
}

// ---- usage -----------------------------------------------------------------

// Every quota a team may have (docs/operations.md "Quotas per team"), how
// its use and limit read.
const mins = (q) => ((q.used_seconds !== undefined ? q.used_seconds : q.used * 60) / 60).toFixed(1) + ' min';
const QUOTAS = [
  ['bytes', 'stored bytes (after deduplication)', (q) => bytes(q.used), (v) => bytes(v)],
  ['repos', 'repositories', (q) => String(q.used), String],
  ['builds', 'builds running at once', (q) => String(q.used), String],
  ['build_minutes', 'build minutes today (UTC)', mins, (v) => v + ' min'],
  ['sandboxes', 'sandboxes running on this host', (q) => String(q.used), String],
  ['sandbox_memory_mib', "their memory", (q) => q.used + ' MiB', (v) => v + ' MiB'],
  ['sandbox_vcpus', 'their vCPUs', (q) => String(q.used), String],
];

async function viewUsage() {
  const u = await api('/kiln/v1/usage');
  const picked = team();
  if (picked) u.teams = u.teams.filter((t) => t.team === picked);
  const meter = (used, limit) => {
    const pct = limit > 0 ? Math.min(100, (100 * used) / limit) : 100;
    const bar = el('span');
    bar.style.width = pct.toFixed(1) + '%'; // CSSOM, allowed by the CSP (no inline style attribute)
    return el('span', { class: 'row' }, el('span', { class: 'meter' + (used >= limit ? ' over' : ''), role: 'img',
      'aria-label': `${pct.toFixed(0)} percent` }, bar), `${pct.toFixed(0)}%`);
  };
  const out = [el('h1', {}, 'Usage against quotas')];
  if (!u.teams.length) out.push(el('p', { class: 'muted' }, 'No team to show.'));
  for (const t of u.teams) {
    const rows = QUOTAS.filter(([k]) => t.quotas[k]).map(([k, what, used, lim]) => {
      const q = t.quotas[k];
      const counted = q.used !== null && q.used !== undefined;
      const usedVal = k === 'build_minutes' && q.used_seconds !== undefined ? q.used_seconds / 60 : q.used;
      return el('tr', { 'data-quota': k },
        el('th', { scope: 'row' }, what),
        el('td', { class: 'num used' }, counted ? used(q) : el('span', { class: 'muted' }, 'not counted here')),
        el('td', { class: 'num limit' }, q.limit === null ? el('span', { class: 'muted' }, 'no limit') : lim(q.limit)),
        el('td', {}, counted && q.limit !== null ? meter(usedVal, q.limit) : ''));
    });
    out.push(el('section', { 'data-team': t.team, 'aria-labelledby': 'usage-' + t.team },
      el('h2', { id: 'usage-' + t.team }, t.team),
      el('p', { class: 'muted' }, `${t.repos} repositories, ${t.tags} tags, ${t.blobs} blobs, ${bytes(t.bytes)} stored`),
      el('table', { class: 'usage' },
        el('thead', {}, el('tr', {}, el('th', {}, 'quota'), el('th', { class: 'num' }, 'used'),
          el('th', { class: 'num' }, 'limit'), el('th', {}, 'used / limit'))),
        el('tbody', {}, rows))));
  }
  show(...out);
}

// ---- routing ---------------------------------------------------------------

async function route() {
  stopView();
  stopView = () => {};
  if (!me) return;
  const parts = (location.hash || '#/templates').slice(2).split('/').map(decodeURIComponent);
  const view = parts[0] || 'templates';
  for (const a of document.querySelectorAll('nav a'))
    if (a.dataset.view === view || (view === 'build' && a.dataset.view === 'builds') ||
        (view === 'history' && a.dataset.view === 'templates')) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  try {
    if (view === 'history') await viewHistory(parts[1], parts.slice(2).join('/'));
    else if (view === 'builds') await viewBuilds();
    else if (view === 'build') await viewBuild(parts.slice(1).join('/'));
    else if (view === 'sandboxes') await viewSandboxes();
    else if (view === 'usage') await viewUsage();
    else await viewTemplates();
  } catch (e) {
    failure(e);
  }
}

function enter() {
  $('login').hidden = true;
  $('nav').hidden = false;
  $('logout').hidden = !me.auth;
  teamPicker();
  const ns = teams('pull');
  $('who').textContent = me.auth ? 'teams: ' + (ns.join(', ') || 'none') : 'auth off';
  route();
}

async function start() {
  $('login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const tok = $('token').value.trim();
    $('token').value = '';
    const err = await login(tok);
    $('login-error').textContent = err ? 'Login failed: ' + err : '';
    if (!err) enter();
  });
  $('logout').addEventListener('click', logout);
  $('team').addEventListener('change', (ev) => { sessionStorage.setItem(TEAM_KEY, ev.target.value); route(); });
  window.addEventListener('hashchange', route);
  // A server without auth, or a token kept in this tab, needs no login.
  if (!(await login())) enter();
  else logout();
}

start();
