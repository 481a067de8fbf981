// browser.status_page: the operators' status page (GET /status) in real headless Chromium,
// against a running quiver-agent with real upstreams: server-everything (npm) and
// tests/peers/test-upstream.mjs serving a tool whose name and description are HTML.
//
//   node tests/browser/status_page.mjs [--agent build/native/native-agent/quiver-agent]
//                                      [--out DIR]   (the screenshot; default: a temp dir)
//
// Chromium (Debian's `chromium`, or $QUIVER_CHROMIUM) is driven over the DevTools protocol on a
// pipe (--remote-debugging-pipe: no port, no npm package). Exits 77 (skipped) only when it is
// absent. The agent and the upstreams are tied to this process (tests/edge/harness.mjs); Chromium
// runs in its own process group, killed on the way out, and exits by itself when its pipe closes.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Agent, agentBinaryOrSkip, nodeModules, testUpstreamScript } from '../edge/agent.mjs';
import { argValue, sleep, waitFor } from '../edge/harness.mjs';

const HOSTILE = '<img src=x onerror=alert(1)>';
const chromium = process.env.QUIVER_CHROMIUM || '/usr/bin/chromium';
if (!existsSync(chromium)) {
  console.log(`SKIP: no Chromium at ${chromium} (apt-get install chromium, or set QUIVER_CHROMIUM)`);
  process.exit(77);
}
const binary = agentBinaryOrSkip();
const outDir = path.resolve(argValue('--out', mkdtempSync(path.join(os.tmpdir(), 'quiver-browser-'))));
mkdirSync(outDir, { recursive: true });

// ---- a small DevTools protocol client over Chromium's pipe (fd 3: ours to it, fd 4: its) ----

class Browser {
  static async launch() {
    const b = new Browser();
    b.profile = mkdtempSync(path.join(os.tmpdir(), 'quiver-chromium-'));
    const args = ['--headless=new', '--remote-debugging-pipe', `--user-data-dir=${b.profile}`,
      '--no-first-run', '--no-default-browser-check', '--disable-gpu', '--disable-extensions',
      '--disable-background-networking', '--disable-sync', '--window-size=1400,900',
      ...(process.getuid && process.getuid() === 0 ? ['--no-sandbox'] : []), 'about:blank'];
    b.proc = spawn(chromium, args, { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'],
                                     detached: true });
    b.stderr = [];
    b.proc.stderr.on('data', (d) => b.stderr.push(String(d)));
    b.exited = new Promise((resolve) => b.proc.once('exit', resolve));
    b.next = 1;
    b.pending = new Map();
    b.listeners = [];
    let buffered = '';
    b.proc.stdio[4].on('data', (chunk) => {
      buffered += chunk;
      for (let i; (i = buffered.indexOf('\0')) >= 0;) {
        const msg = JSON.parse(buffered.slice(0, i));
        buffered = buffered.slice(i + 1);
        if (msg.id && b.pending.has(msg.id)) {
          const { resolve, reject, method } = b.pending.get(msg.id);
          b.pending.delete(msg.id);
          if (msg.error) reject(new Error(`${method}: ${msg.error.message}`));
          else resolve(msg.result);
        } else if (msg.method) {
          for (const l of b.listeners) l(msg);
        }
      }
    });
    b.proc.stdio[3].on('error', () => {});
    await b.send('Browser.getVersion');
    return b;
  }

  send(method, params = {}, sessionId) {
    const id = this.next++;
    const msg = { id, method, params, ...(sessionId ? { sessionId } : {}) };
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, method });
      this.proc.stdio[3].write(`${JSON.stringify(msg)}\0`);
      setTimeout(() => {
        if (this.pending.delete(id)) reject(new Error(`${method}: no answer in 30 s`));
      }, 30000).unref();
    });
  }

  // A new tab (its own sessionStorage): navigate, evaluate, screenshot.
  async page() {
    const { targetId } = await this.send('Target.createTarget', { url: 'about:blank' });
    const { sessionId } = await this.send('Target.attachToTarget', { targetId, flatten: true });
    const page = {
      dialogs: [], errors: [],
      send: (method, params) => this.send(method, params, sessionId),
      async eval(expression) {
        const r = await page.send('Runtime.evaluate',
          { expression, awaitPromise: true, returnByValue: true });
        if (r.exceptionDetails) {
          throw new Error(`in the page: ${r.exceptionDetails.exception?.description ??
                          r.exceptionDetails.text}`);
        }
        return r.result.value;
      },
      async until(what, expression, timeoutMs = 20000) {
        return waitFor(what, async () => (await page.eval(expression)) || undefined, timeoutMs);
      },
    };
    this.listeners.push((msg) => {
      if (msg.sessionId !== sessionId) return;
      if (msg.method === 'Page.javascriptDialogOpening') {
        page.dialogs.push(msg.params.message);
        page.send('Page.handleJavaScriptDialog', { accept: true }).catch(() => {});
      } else if (msg.method === 'Runtime.exceptionThrown') {
        page.errors.push(msg.params.exceptionDetails.exception?.description ??
                         msg.params.exceptionDetails.text);
      } else if (msg.method === 'Log.entryAdded' &&
                 /Content.Security.Policy/i.test(msg.params.entry.text)) {
        page.errors.push(msg.params.entry.text);
      }
    });
    await page.send('Page.enable');
    await page.send('Runtime.enable');
    await page.send('Log.enable');
    return page;
  }

  async close() {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    await Promise.race([this.send('Browser.close').catch(() => {}), sleep(3000)]);
    const t = setTimeout(() => { try { process.kill(-this.proc.pid, 'SIGKILL'); } catch (_) {} }, 3000);
    await this.exited;
    clearTimeout(t);
    try { process.kill(-this.proc.pid, 'SIGKILL'); } catch (_) { /* the group is gone */ }
    rmSync(this.profile, { recursive: true, force: true });
  }
}

// ---- the test ----

const checks = [];
function check(ok, what) {
  checks.push({ ok, what });
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
}

const work = mkdtempSync(path.join(os.tmpdir(), 'quiver-status-page-'));
const control = path.join(work, 'hostile.control');
// Applied by the upstream at its start (the control file is read from its first line).
writeFileSync(control, `${JSON.stringify({ add_tool: HOSTILE, description: `${HOSTILE} says hi` })}\n`);
const modules = nodeModules();
const config = {
  mcpServers: {
    everything: {
      command: process.execPath,
      args: [path.join(modules, '@modelcontextprotocol/server-everything/dist/index.js'), 'stdio'],
    },
    hostile: {
      command: process.execPath,
      args: [testUpstreamScript, 'stdio', '--tools', '2', '--control', control, '--quiet'],
      env: { QUIVER_NODE_MODULES: modules },
    },
  },
  quiver: {
    members: ['ops', 'alice'],
    operators: ['ops'],
    grants: { '*': ['*'] },
    caller_token_keys: { k1: { env: 'STATUS_PAGE_TOKEN_KEY' } },
    runtime: { list_timeout_ms: 30000 },
  },
};

const logs = [];
let agent = null;
let browser = null;
let failed = false;
try {
  agent = await Agent.start({
    binary, config, logs, env: { STATUS_PAGE_TOKEN_KEY: 'k'.repeat(32) + Date.now() },
  });
  const ops = agent.token('ops');
  const alice = agent.token('alice');
  const api = async (method, p, token, body) => {
    const r = await agent.request(method, p, {
      headers: { Authorization: `Bearer ${token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: r.status, json: r.json, headers: r.headers };
  };
  // Both connections listed (the hostile tool among them) before the browser looks.
  const status = await waitFor('both connections fresh', async () => {
    const s = (await api('GET', '/v1/admin/status', ops)).json;
    const fresh = s.connections.every((c) => c.principals.every((p) => p.status === 'fresh'));
    const hostile = s.connections.find((c) => c.name === 'hostile');
    return fresh && hostile.principals[0].counts.tools === 3 ? s : undefined;
  }, 60000);

  // The API around the page.
  const page0 = await agent.request('GET', '/status');
  check(page0.status === 200 && /text\/html/.test(page0.headers['content-type']) &&
        page0.headers['content-security-policy'] ===
          "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'" &&
        page0.headers['x-content-type-options'] === 'nosniff' &&
        page0.headers['cache-control'] === 'no-cache', 'GET /status: the page, its headers');
  check((await agent.request('GET', '/status.js')).headers['content-type'].startsWith('text/javascript'),
        'GET /status.js is JavaScript');
  check((await agent.request('GET', '/v1/admin/status')).status === 401, 'no token: 401');
  check((await api('GET', '/v1/admin/status', alice)).status === 403, 'a member: 403');
  check((await api('POST', '/v1/admin/connections/hostile/refresh', alice)).status === 403,
        'a member cannot refresh: 403');

  browser = await Browser.launch();
  const page = await browser.page();
  const base = `http://127.0.0.1:${agent.port}`;
  await page.send('Page.navigate', { url: `${base}/status` });
  await page.until('the login form', "document.readyState === 'complete' && !!document.getElementById('token')");
  await page.eval("document.getElementById('token').focus()");
  await page.send('Input.insertText', { text: ops });
  await page.eval("document.querySelector('#login button[type=submit]').click()");
  await page.until('a row per connection', "document.querySelectorAll('tr.conn').length === 2");

  const rows = await page.eval(`[...document.querySelectorAll('tr.conn')].map((tr) => ({
    id: tr.dataset.connection, name: tr.querySelector('.name').firstChild.textContent,
    status: tr.querySelector('.status .badge').textContent, counts: tr.querySelector('.counts').textContent,
    at: tr.querySelector('.last-listing').dataset.at }))`);
  check(await page.eval("getComputedStyle(document.getElementById('login')).display === 'none'"),
        'signed in: the token form is gone');
  check(JSON.stringify(rows.map((r) => r.name).sort()) === '["everything","hostile"]',
        `every connection listed: ${rows.map((r) => r.name).join(', ')}`);
  check(rows.every((r) => r.status === 'fresh'), 'every status is fresh');
  const hostileRow = rows.find((r) => r.name === 'hostile');
  check(/^3 tools · 2 resources · 1 templates · 2 prompts/.test(hostileRow.counts),
        `hostile's counts: ${hostileRow.counts}`);
  const every = status.connections.find((c) => c.name === 'everything').principals[0].counts;
  const manifests = (await api('GET', '/v1/manifests', alice)).json;
  const listed = manifests.connections.find((c) => c.name === 'everything').manifest;
  const itemsOf = (l) => (Array.isArray(l) ? l : l.items).length;
  const everyRow = rows.find((r) => r.name === 'everything');
  check(every.tools === itemsOf(listed.tools) &&
        everyRow.counts.startsWith(`${every.tools} tools · ${every.resources} resources`),
        `everything's counts agree with its manifest: ${everyRow.counts}`);

  // The hostile capability, shown as text: no <img> in the page, no dialog.
  await page.eval(`document.querySelector('details[data-connection="${hostileRow.id}"] summary').click()`);
  await page.until('the capability list',
    `!!document.querySelector('details[data-connection="${hostileRow.id}"] input[type=checkbox]')`);
  const shown = await page.eval(`[...document.querySelectorAll('details[data-connection="${hostileRow.id}"] .key')].map((k) => k.textContent)`);
  check(shown.includes(HOSTILE), `the hostile tool name shown as text (${shown.length} capabilities)`);
  check(await page.eval("document.querySelectorAll('img').length") === 0, 'no <img> was injected');
  const file = path.join(outDir, 'status_page.png');
  const shot = await page.send('Page.captureScreenshot', { format: 'png', captureBeyondViewport: true });
  writeFileSync(file, Buffer.from(shot.data, 'base64'));
  console.log(`screenshot: ${file}`);

  // Refresh: the last listing's time moves.
  await page.eval(`document.querySelector('tr.conn[data-connection="${hostileRow.id}"] button.refresh').click()`);
  const moved = await page.until('a new listing of hostile', `(() => {
    const at = document.querySelector('tr.conn[data-connection="${hostileRow.id}"] .last-listing').dataset.at;
    return at && at !== ${JSON.stringify(hostileRow.at ?? '')} ? at : false; })()`, 30000);
  check(Number(moved) > Number(hostileRow.at ?? 0), `Refresh listed hostile again (${hostileRow.at} → ${moved})`);

  // Toggle tool_1 off: gone from the member's manifests; on again: back.
  const toolsOf = async () => {
    const m = (await api('GET', '/v1/manifests', alice)).json;
    const t = m.connections.find((c) => c.name === 'hostile').manifest.tools;
    return (Array.isArray(t) ? t : t.items).map((x) => x.name);
  };
  const box = `document.querySelector('details[data-connection="${hostileRow.id}"] input[data-key="tool_1"]')`;
  check((await toolsOf()).includes('tool_1'), 'tool_1 listed for alice');
  await page.eval(`${box}.click()`);
  await waitFor('tool_1 hidden', async () => !(await toolsOf()).includes('tool_1') || undefined, 15000);
  check(true, 'toggled off in the page: tool_1 gone from GET /v1/manifests');
  await page.until('the list re-rendered', `${box} && !${box}.disabled && !${box}.checked`);
  await page.eval(`${box}.click()`);
  await waitFor('tool_1 back', async () => (await toolsOf()).includes('tool_1') || undefined, 15000);
  check(true, 'toggled on again: tool_1 back');

  // A member's token: the page says 403.
  const other = await browser.page();
  await other.send('Page.navigate', { url: `${base}/status` });
  await other.until('the login form', "document.readyState === 'complete' && !!document.getElementById('token')");
  await other.eval("document.getElementById('token').focus()");
  await other.send('Input.insertText', { text: alice });
  await other.eval("document.querySelector('#login button[type=submit]').click()");
  const said = await other.until('the refusal', "document.getElementById('message').hidden ? false : document.getElementById('message').textContent");
  check(/^Forbidden/.test(said) && await other.eval("document.getElementById('view').hidden"),
        `a member's token is refused: "${said}"`);

  check(page.dialogs.length === 0 && other.dialogs.length === 0, 'no dialog fired');
  check(page.errors.length === 0 && other.errors.length === 0,
        `no script error or CSP violation${page.errors.concat(other.errors).map((e) => `\n  ${e}`).join('')}`);
} catch (e) {
  failed = true;
  console.log(`FAIL ${e.stack || e}`);
  console.log(logs.slice(-30).join('\n'));
  if (browser) console.log(browser.stderr.join('').slice(-2000));
} finally {
  await browser?.close();
  await agent?.stop();
  rmSync(work, { recursive: true, force: true });
}
failed = failed || checks.some((c) => !c.ok);
console.log(failed ? 'browser.status_page: FAILED' : `browser.status_page: ${checks.length} checks passed`);
process.exit(failed ? 1 : 0);
