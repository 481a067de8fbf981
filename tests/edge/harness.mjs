// Real processes for the edge's end-to-end tests and benchmarks: a redis-server and workerd
// serving the staged quiver-edge (build/wasm/edge/), both on free loopback ports, started and
// stopped by the caller. Plus what a test needs around them: a small RESP client, HS256 caller
// tokens minted with node's own crypto (an implementation independent of the core's), and
// manifests in the layout of schema/redis-keys.md built from a real server's tools/list.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash, createHmac } from 'node:crypto';
import {
  copyFileSync, existsSync, mkdirSync, readFileSync, mkdtempSync, rmSync, writeFileSync,
} from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// `--name value` from the command line, else `fallback`.
export function argValue(name, fallback) {
  const i = process.argv.indexOf(name, 2);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

// The staged edge (scripts/edge-build.sh), or --edge-dir.
export const edgeDirArg = () =>
  path.resolve(argValue('--edge-dir', path.join(repoRoot, 'build', 'wasm', 'edge')));

// One HTTP request to 127.0.0.1:port; resolves to {status, headers, text, json}.
export function httpRequest(port, method, pathAndQuery, { headers = {}, body, agent } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: pathAndQuery, headers,
                               agent }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json;
        try {
          json = text ? JSON.parse(text) : undefined;
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

// Runs the tests in order (only those whose name contains `only`), one `ok`/`FAIL` line each;
// resolves to the number that failed.
export async function runTests(tests, only = '') {
  let failed = 0;
  for (const t of tests) {
    if (only && !t.name.includes(only)) continue;
    const t0 = Date.now();
    try {
      await t.fn();
      console.log(`ok    ${t.name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL  ${t.name}\n${e.stack ?? e}`);
    }
  }
  return failed;
}

// What the processes' logs must never hold after a run: an internal error, or one of `secrets`.
// Prints a FAIL line per kind; resolves to how many kinds were found.
export function loggedProblems(logs, secrets = []) {
  let problems = 0;
  const unexpected = logs.filter((l) => /INTERNAL|exception|Uncaught/i.test(l));
  if (unexpected.length) {
    problems++;
    console.log(`FAIL  internal errors logged:\n${unexpected.slice(0, 10).join('\n')}`);
  }
  if (logs.some((l) => secrets.some((s) => s && l.includes(s)))) {
    problems++;
    console.log('FAIL  a secret appeared in a log line');
  }
  return problems;
}

// Starts `command` so that it cannot outlive this process: a shell runs it and stops it as soon as
// its stdin (a pipe from us) closes — when we stop it, and also when we die, even by SIGKILL (a
// ctest timeout). Stopping is SIGTERM, then SIGKILL after 3 s if the command is still running (a
// workerd spinning in a bug ignores SIGTERM). The shell only signals its own child, before it has
// reaped it, so the id cannot belong to anyone else. (A background job's stdin is /dev/null in
// sh: the pipe is kept as fd 3 for the watcher.)
const TIED = `
exec 3<&0
"$@" </dev/null &
child=$!
{ read -r _ <&3; kill -TERM $$; } 2>/dev/null &
stop() {
  [ -n "$child" ] || exit 0
  kill -TERM "$child" 2>/dev/null
  n=0
  while [ $n -lt 30 ]; do
    state=$(cut -d' ' -f3 "/proc/$child/stat" 2>/dev/null) || break
    [ "$state" = Z ] && break
    sleep 0.1
    n=$((n + 1))
  done
  [ "$state" = Z ] || kill -KILL "$child" 2>/dev/null
  wait "$child"
  exit 143
}
trap stop TERM INT
wait "$child"
rc=$?
child=
exit $rc
`;
export function spawnTied(command, args, options = {}) {
  const proc = spawn('sh', ['-c', TIED, 'sh', command, ...args],
                     { ...options, stdio: ['pipe', options.stdout ?? 'pipe', 'pipe'] });
  proc.stdin.on('error', () => {});
  return proc;
}

export async function stopTied(proc, exited) {
  if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
  proc.stdin.end();
  const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(t);
}

// Polls `probe` until it gives a truthy value, which it resolves to.
export async function waitFor(what, probe, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value) return value;
    } catch (e) {
      last = e;
    }
    await sleep(50);
  }
  const why = last ? `: ${last.message}` : '';
  throw new Error(`${what} did not come up within ${timeoutMs} ms${why}`);
}

// Polls `server`'s GET /v1/manifests (an agent or an edge) as the holder of `token` until it
// lists exactly `count` connections, every one fresh: what the suites wait for before their tests
// (a per-member manifest not listed yet is a miss there, which queues its listing).
export function waitForFresh(server, token, count, timeoutMs = 30000) {
  return waitFor(`${count} connection(s) listed fresh`, async () => {
    const res = await server.request('GET', '/v1/manifests',
                                     { headers: { authorization: `Bearer ${token}` } });
    return res.status === 200 && res.json.connections.length === count &&
      res.json.connections.every((c) => c.status === 'fresh');
  }, timeoutMs);
}

// ---- RESP --------------------------------------------------------------------------------------

function encodeCommand(args) {
  const parts = [Buffer.from(`*${args.length}\r\n`)];
  for (const a of args) {
    const b = Buffer.isBuffer(a) ? a : Buffer.from(String(a));
    parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n'));
  }
  return Buffer.concat(parts);
}

// One reply from `buf` at `at`: [value, next offset], or null when incomplete.
function parseReply(buf, at) {
  const eol = buf.indexOf('\r\n', at);
  if (eol < 0) return null;
  const type = String.fromCharCode(buf[at]);
  const line = buf.toString('utf8', at + 1, eol);
  const next = eol + 2;
  switch (type) {
    case '+':
      return [line, next];
    case '-':
      return [new RedisError(line), next];
    case ':':
      return [Number(line), next];
    case '$': {
      const n = Number(line);
      if (n < 0) return [null, next];
      if (buf.length < next + n + 2) return null;
      return [buf.toString('utf8', next, next + n), next + n + 2];
    }
    case '*': {
      const n = Number(line);
      if (n < 0) return [null, next];
      const out = [];
      let pos = next;
      for (let i = 0; i < n; i++) {
        const r = parseReply(buf, pos);
        if (!r) return null;
        out.push(r[0]);
        pos = r[1];
      }
      return [out, pos];
    }
    default:
      throw new Error(`bad RESP type byte ${type}`);
  }
}

export class RedisError extends Error {}

// A minimal pipelining Redis client for test set-up and checks.
export class Redis {
  // `password` alone authenticates the default user; with `username`, that ACL user. With `ca`
  // (a PEM file), over TLS to a port that expects it, the server's certificate verified against
  // that CA for the name localhost.
  static connect(port, password, username = '', { ca = null } = {}) {
    return new Promise((resolve, reject) => {
      const socket = ca
        ? tls.connect({ port, host: '127.0.0.1', servername: 'localhost', ca: readFileSync(ca) })
        : net.connect(port, '127.0.0.1');
      socket.once('error', reject);
      socket.once(ca ? 'secureConnect' : 'connect', async () => {
        socket.removeListener('error', reject);
        const r = new Redis(socket);
        try {
          if (password) await (username ? r.call('AUTH', username, password) : r.call('AUTH', password));
          resolve(r);
        } catch (e) {
          reject(e);
        }
      });
    });
  }

  constructor(socket) {
    this.socket = socket;
    this.buf = Buffer.alloc(0);
    this.waiting = [];
    socket.on('data', (d) => {
      this.buf = Buffer.concat([this.buf, d]);
      for (;;) {
        const r = this.waiting.length ? parseReply(this.buf, 0) : null;
        if (!r) break;
        this.buf = this.buf.subarray(r[1]);
        const w = this.waiting.shift();
        r[0] instanceof RedisError ? w.reject(r[0]) : w.resolve(r[0]);
      }
    });
    socket.on('error', (e) => this.waiting.splice(0).forEach((w) => w.reject(e)));
    socket.on('close', () =>
      this.waiting.splice(0).forEach((w) => w.reject(new Error('redis connection closed'))));
  }

  call(...args) {
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      this.socket.write(encodeCommand(args));
    });
  }

  // Many commands in one write; resolves to their replies (errors as RedisError values).
  pipeline(commands) {
    const done = commands.map(
      () => new Promise((resolve) => this.waiting.push({ resolve, reject: resolve })));
    this.socket.write(Buffer.concat(commands.map(encodeCommand)));
    return Promise.all(done);
  }

  close() {
    this.socket.destroy();
  }
}

// The edge's least-privilege Redis user, exactly as schema/redis-acl-edge.txt describes it, for
// namespace `ns`: created through `admin` (a client of the default user).
export const EDGE_REDIS_USER = 'quiver-edge';
export function edgeAclRules(ns) {
  const text = readFileSync(path.join(repoRoot, 'schema', 'redis-acl-edge.txt'), 'utf8');
  return text.split('\n').map((l) => l.replace(/#.*/, '').trim()).filter(Boolean)
    .map((rule) => rule.replaceAll('{ns', `{${ns}`));  // `{ns}` and v2's `{ns:c:`, ...
}
export async function createEdgeUser(admin, ns, password) {
  await admin.call('ACL', 'SETUSER', EDGE_REDIS_USER, 'reset', ...edgeAclRules(ns), `>${password}`);
}

// What the edge suites start on: a redis-server (`options` as RedisServer.start takes them) with
// the edge's user for namespace `ns` created (password `edgePassword`), and `db`, a client of the
// default user.
export async function startEdgeRedis(ns, edgePassword, options = {}) {
  const redis = await RedisServer.start(options);
  const db = await redis.client();
  await createEdgeUser(db, ns, edgePassword);
  return { redis, db };
}

// Whether an answer's `X-Quiver-Cache` says it was read from Redis: a full read (`miss`) or a
// conditional one that found its copy current (`revalidated`, docs/design.md "Versions instead of
// the epoch"); not an L1 hit or a stale-if-error copy.
export const readFromRedis = (source) => source === 'miss' || source === 'revalidated';

// Exits 77 (ctest's SKIP_RETURN_CODE) when `command args` does not run: a part is not installed.
export function skipUnlessInstalled(command, args) {
  const r = spawnSync(command, args, { encoding: 'utf8' });
  if (r.error || r.status !== 0) {
    console.log(`SKIP: ${command} is not installed (scripts/setup.sh)`);
    process.exit(77);
  }
}

// ---- TLS ---------------------------------------------------------------------------------------

// A private CA (made once per `dir`: ca.pem, ca.key) and a certificate it signed for `san`
// (localhost and 127.0.0.1 unless told), as a hosted Redis would present, made by openssl in
// `dir`: {ca, cert, key} (PEM file paths; the certificate's named `name`.pem and `name`.key).
export function makeTestCertificates(dir, { name = 'redis',
                                            san = 'DNS:localhost,IP:127.0.0.1' } = {}) {
  const ssl = (...a) => execFileSync('openssl', a, { cwd: dir, stdio: 'pipe' });
  if (!existsSync(path.join(dir, 'ca.pem'))) {
    ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj',
        '/CN=quiver test CA', '-keyout', 'ca.key', '-out', 'ca.pem');
  }
  ssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-keyout', `${name}.key`,
      '-out', `${name}.csr`);
  writeFileSync(path.join(dir, `${name}.ext`), `subjectAltName=${san}\n`);
  ssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial',
      '-days', '2', '-extfile', `${name}.ext`, '-out', `${name}.pem`);
  return { ca: path.join(dir, 'ca.pem'), cert: path.join(dir, `${name}.pem`),
           key: path.join(dir, `${name}.key`) };
}

// The staged worker of `edgeDir` copied into `dir` with a workerd config that trusts the CA in
// `dir`/ca.pem (makeTestCertificates) instead of the browsers' ones. Returns the config's path.
export function stageEdgeTrustingTestCa(edgeDir, dir) {
  for (const f of ['worker.mjs', 'quiver-edge.mjs', 'quiver-edge.wasm']) {
    copyFileSync(path.join(edgeDir, f), path.join(dir, f));
  }
  const staged = readFileSync(path.join(edgeDir, 'workerd.capnp'), 'utf8');
  const config = staged.replace('tlsOptions = (trustBrowserCas = true)',
                                'tlsOptions = (trustedCertificates = [embed "ca.pem"])');
  if (config === staged) throw new Error('the staged workerd.capnp lacks the TLS options replaced');
  writeFileSync(path.join(dir, 'workerd.capnp'), config);
  return path.join(dir, 'workerd.capnp');
}

// ---- processes ---------------------------------------------------------------------------------

class RedisExitedAtStart extends Error {}

// A redis-server on loopback. With `tls` ({cert, key}), it also listens with TLS on `tlsPort`
// (clients not asked for certificates); `port` stays plain TCP for the test's own client.
export class RedisServer {
  // `port`: a given one (a Redis restarted where its clients expect it), else a free one.
  // `dir`: the data directory of a Redis stopped with stop({ keepData: true }) (it loads the
  // dump.rdb a SAVE left there), else a new one.
  // `args`: more redis-server arguments.
  // A free port can be taken before redis-server binds it (another test process, or a client's
  // ephemeral port): one found here whose server exits at start is tried again on new ports, three
  // times.
  static async start(options = {}) {
    for (let attempt = 1; ; attempt++) {
      try {
        return await RedisServer.startOnce(options);
      } catch (e) {
        if (options.port || attempt >= 3 || !(e instanceof RedisExitedAtStart)) throw e;
      }
    }
  }

  static async startOnce({ password = '', tls = null, port = 0, dir = null, args: more = [] }) {
    const s = new RedisServer();
    s.port = port || await freePort();
    s.password = password;
    s.dir = dir ?? mkdtempSync(path.join(os.tmpdir(), 'quiver-edge-redis-'));
    const args = ['--port', String(s.port), '--bind', '127.0.0.1', '--save', '', '--appendonly',
                  'no', '--dir', s.dir, '--protected-mode', 'yes'];
    if (password) args.push('--requirepass', password);
    if (tls) {
      s.tlsPort = await freePort();
      args.push('--tls-port', String(s.tlsPort), '--tls-cert-file', tls.cert, '--tls-key-file',
                tls.key, '--tls-auth-clients', 'no');
    }
    args.push(...more);
    s.proc = spawnTied('redis-server', args, { stdout: 'ignore' });
    s.proc.stderr.pipe(process.stderr);
    s.exited = new Promise((resolve) => s.proc.once('exit', resolve));
    const spawnError = new Promise((_, reject) => s.proc.once('exit', (code) => reject(
      new RedisExitedAtStart(`redis-server exited (${code}): is it installed? run scripts/setup.sh`))));
    spawnError.catch(() => {});
    try {
      await Promise.race([spawnError, waitFor('redis-server', async () => {
        const c = await Redis.connect(s.port, password);
        c.close();
        return true;
      })]);
    } catch (e) {
      if (e instanceof RedisExitedAtStart && !dir) rmSync(s.dir, { recursive: true, force: true });
      throw e;
    }
    return s;
  }

  client() {
    return Redis.connect(this.port, this.password);
  }

  // `keepData`: the data directory stays, for a RedisServer started again on it.
  async stop({ keepData = false } = {}) {
    await stopTied(this.proc, this.exited);
    this.proc = null;
    if (!keepData) rmSync(this.dir, { recursive: true, force: true });
  }
}

export function workerdBinary() {
  return process.env.QUIVER_WORKERD ||
         path.join(repoRoot, 'build', 'node', 'node_modules', '.bin', 'workerd');
}

// An HTTP server in a child process tied to this one (spawnTied) on `port`, its output in
// `logs`: launch() resolves once `GET /healthz` answers at all (`timeoutMs`), or rejects with
// `exitHint` when the process exits first. Workerd and wrangler.mjs's WranglerDev are these.
export class ServedProcess {
  async launch({ command, args, options, logs, what, exitHint, timeoutMs }) {
    this.logs = logs;
    this.proc = spawnTied(command, args, options);
    for (const stream of [this.proc.stdout, this.proc.stderr]) {
      stream.setEncoding('utf8');
      stream.on('data', (d) => logs.push(...d.split('\n').filter(Boolean)));
    }
    this.exited = new Promise((resolve) => this.proc.once('exit', resolve));
    const spawnError = new Promise((_, reject) => this.proc.once('exit', (code) => reject(
      new Error(`${what} exited (${code}): ${exitHint()}`))));
    spawnError.catch(() => {});
    this.agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
    try {
      await Promise.race([spawnError, waitFor(what, async () =>
        (await this.request('GET', '/healthz')).status > 0, timeoutMs)]);
    } catch (e) {
      await this.stop();
      throw new Error(`${e.message}\n${logs.join('\n')}`);
    }
  }

  // One HTTP request; resolves to {status, headers, text, json}.
  request(method, pathAndQuery, opts = {}) {
    return httpRequest(this.port, method, pathAndQuery, { agent: this.agent, ...opts });
  }

  async stop() {
    this.agent?.destroy();
    await stopTied(this.proc, this.exited);
    this.proc = null;
  }
}

// workerd serving `socket` of a capnp config on a free loopback port. `env` holds the worker's
// variables (workerd.capnp reads them with fromEnvironment); its output goes to `logs`.
export class Workerd extends ServedProcess {
  // The free port can be taken before workerd binds it (another test process, or a client's
  // ephemeral port): a workerd that could not bind is started again on a new port, three times.
  static async start({ config, env = {}, logs = [], socket = 'http' }) {
    for (let attempt = 1; ; attempt++) {
      const w = new Workerd();
      w.port = await freePort();
      try {
        await w.launch({
          command: workerdBinary(),
          args: ['serve', config, '--socket-addr', `${socket}=127.0.0.1:${w.port}`],
          options: { env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env } },
          logs, what: 'workerd', timeoutMs: 15000,
          exitHint: () => 'is it installed? (scripts/setup.sh; QUIVER_WORKERD)',
        });
        return w;
      } catch (e) {
        if (attempt >= 3 || !/bind\(\): Address already in use/.test(e.message)) throw e;
      }
    }
  }
}

// ---- tokens ------------------------------------------------------------------------------------

const b64url = (value) => Buffer.from(value).toString('base64url');

// A caller token as shared/caller_token.h verifies it: compact JWT, HS256, kid, sub = member.
export function mintToken({ member, kid, secret, nowMs = Date.now(), ttlMs = 3600_000,
                            aud = 'quiver', alg = 'HS256', extra = {} }) {
  const header = { alg, typ: 'JWT', kid };
  const claims = { sub: member, iat: Math.floor(nowMs / 1000),
                   exp: Math.floor((nowMs + ttlMs) / 1000), aud, ...extra };
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`;
  if (alg === 'none') return `${input}.`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
}

// ---- data in the Redis key layout (schema/redis-keys.md) ---------------------------------------

export const hashOf = (text) => `sha256-${createHash('sha256').update(text).digest('base64url')}`;

// The tools server-everything really lists (captured in tests/fixtures).
export function everythingTools() {
  const capture = readFileSync(
    path.join(repoRoot, 'tests', 'fixtures', 'sse', 'server-everything-tools-list.txt'), 'utf8');
  for (const line of capture.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const msg = JSON.parse(line.slice(6));
    if (msg.result?.tools) return msg.result.tools;
  }
  throw new Error('no tools/list result in the capture');
}

const emptyList = () => ({ state: 'absent', items: [], hashes: {}, cache: {} });

// A manifest (schema/manifest.schema.json) holding `tools`.
export function manifestJson(tools, serverName = 'server') {
  const hashes = {};
  for (const t of tools) hashes[t.name] = hashOf(JSON.stringify(t));
  return JSON.stringify({
    format: 'quiver.manifest.v1',
    protocol_version: '2025-11-25',
    server: { name: serverName, version: '1.0.0' },
    capabilities: { tools: {} },
    tools: { state: 'ok', items: tools, hashes, cache: {} },
    resources: emptyList(),
    resource_templates: emptyList(),
    prompts: emptyList(),
    cache: {},
    truncated: false,
    issues: [],
    issues_omitted: 0,
  });
}

export class Layout {
  constructor(ns) {
    this.prefix = `quiver:{${ns}}:`;
  }
  conns() { return `${this.prefix}conns`; }
  conn(cid) { return `${this.prefix}conn:${cid}`; }
  grants(member) { return `${this.prefix}grants:member/${member}`; }
  manifest(cid, principal) { return `${this.prefix}manifest:${cid}:${principal}`; }
  body(digest) { return `${this.prefix}body:${digest}`; }
  lease(cid, principal) { return `${this.prefix}lease:${cid}:${principal}`; }
  disabled(cid, principal) { return `${this.prefix}disabled:${cid}:${principal}`; }
  prefs(cid, principal) { return `${this.prefix}prefs:${cid}:${principal}`; }
  revalidate() { return `${this.prefix}revalidate`; }
  gate(cid, principal) { return `${this.prefix}revalidate-gate:${cid}:${principal}`; }
  epoch() { return `${this.prefix}epoch`; }
  // The versions a conditional read checks (schema/redis-keys.md): a hand-written write moves
  // them as the agent's writes do, or an edge answers from the copy it holds.
  connVersion(cid) { return `${this.prefix}conn-version:${cid}`; }
  memberVersion(member) { return `${this.prefix}member-version:member/${member}`; }
  version(cid, principal) {
    return principal === 'shared' ? this.connVersion(cid) : `${this.prefix}member-version:${principal}`;
  }
  grantees(cid) { return `${this.prefix}grantees:${cid}`; }
  namespace() { return `${this.prefix}namespace`; }
  // The key layout record (shared/layout.h): absent or `v1:...` is the layout the edge reads.
  layoutRecord() { return `${this.prefix}layout`; }
}

export const configHash = (cid) => createHash('sha256').update(`config of ${cid}`).digest('hex');

// Commands writing a connection record, in a namespace an agent has synced (its `namespace`
// record says ready: without it readers answer 503, the store having lost the namespace).
export function connectionCommands(layout, cid, mode, name = cid) {
  return [
    ['SET', layout.namespace(), `ready:${Date.now()}`],
    ['SADD', layout.conns(), cid],
    ['HSET', layout.conn(cid), 'config_hash', configHash(cid), 'credential_mode', mode, 'name',
     name, 'transport', 'stdio', 'updated_at', String(Date.now())],
    ['INCR', layout.connVersion(cid)],
  ];
}

// The name a record gives its body (schema/redis-keys.md, "Manifest bodies"): SHA-256, hex.
export const bodyDigest = (manifest) => createHash('sha256').update(manifest).digest('hex');

// Commands writing a manifest as the agent's fenced commit would, fetched `ageMs` ago with a
// fresh TTL of `freshMs`; and bumping the epoch as every commit does. The body goes to its own
// key, once per content, the record naming it; `inline: true` writes the layout before that (the
// body in the record's `manifest` field), which readers still read.
export function manifestCommands(layout, cid, principal, manifest,
                                 { ageMs = 0, freshMs = 900_000, maxAgeMs = 86_400_000,
                                   inline = false } = {}) {
  const fetched = Date.now() - ageMs;
  const key = layout.manifest(cid, principal);
  const digest = bodyDigest(manifest);
  const body = inline
    ? [['HSET', key, 'manifest', manifest], ['HDEL', key, 'body']]
    : [['SET', layout.body(digest), manifest, 'PXAT', String(fetched + 2 * maxAgeMs)],
       ['HSET', key, 'body', digest], ['HDEL', key, 'manifest']];
  return [
    ...body,
    ['HSET', key, 'etag', hashOf(manifest),
     'config_hash', configHash(cid), 'fence', '1', 'fetched_at', String(fetched),
     'fresh_until', String(fetched + freshMs), 'expires_at', String(fetched + maxAgeMs),
     'cache_scope', '', 'truncated', '0', 'attempt_at', String(fetched)],
    ['INCR', layout.epoch()],
    ['INCR', layout.version(cid, principal)],
  ];
}

// The X-Quiver-Signature value for `body` sent to namespace `ns` (shared/webhook_signature.h),
// made with node's crypto: v2 = HMAC-SHA256(secret, "<ns>\n<t>.<body>").
export function signWebhook(secret, ns, body, nowMs = Date.now()) {
  const t = Math.floor(nowMs / 1000);
  return `t=${t},v2=${createHmac('sha256', secret).update(`${ns}\n${t}.${body}`).digest('hex')}`;
}

// The deprecated form (no namespace), still accepted this release.
export function signWebhookV1(secret, body, nowMs = Date.now()) {
  const t = Math.floor(nowMs / 1000);
  return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${body}`).digest('hex')}`;
}

export function writeTempFile(name, text) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'quiver-edge-'));
  const file = path.join(dir, name);
  writeFileSync(file, text);
  return file;
}

// ---- the suites' common set-up and ending ------------------------------------------------------

// A quiver-edge's environment (its workerd bindings, wrangler's vars) for a test namespace: the
// caller-token key, the L1 lifetime, Redis on loopback as the edge's least-privilege user
// (createEdgeUser), the webhook secrets when given; `extra` adds or overrides any binding.
export function edgeEnv({ ns, kid, secret, redisPort, edgeRedisPassword, l1TtlMs,
                          webhookSecrets = null, extra = {} }) {
  const env = {
    QUIVER_TOKEN_KEYS: JSON.stringify({ [kid]: secret }),
    QUIVER_NAMESPACE: ns,
    QUIVER_L1_TTL_MS: String(l1TtlMs),
    REDIS_HOST: '127.0.0.1',
    REDIS_PORT: String(redisPort),
    REDIS_USERNAME: EDGE_REDIS_USER,
    REDIS_PASSWORD: edgeRedisPassword,
  };
  if (webhookSecrets) env.QUIVER_WEBHOOK_SECRETS = JSON.stringify(webhookSecrets);
  return { ...env, ...extra };
}

// `count` edges in workerd, each the staged worker of `edgeDir` with `env`.
export async function startEdges(count, { edgeDir, env, logs }) {
  const edges = [];
  for (let i = 0; i < count; i++) {
    edges.push(await Workerd.start({ config: path.join(edgeDir, 'workerd.capnp'), env, logs }));
  }
  return edges;
}

// The end of a suite: problems in the logs (internal errors, `secrets`) count as failures; the
// verdict line; when anything failed, the last warnings (every line with QUIVER_EDGE_LOGS=1).
// Exits 0 when nothing failed, else 1.
export function finish({ failed, count, what = 'tests', started, logs, secrets }) {
  failed += loggedProblems(logs, secrets);
  console.log(`${failed ? 'FAILED' : 'passed'}: ${count} ${what} in ${Date.now() - started} ms`);
  if (failed) {
    const shown = process.env.QUIVER_EDGE_LOGS ? logs
                                               : logs.filter((l) => / (WARN|ERROR) /.test(l));
    console.log(shown.slice(-60).join('\n'));
  }
  process.exit(failed ? 1 : 0);
}

// What a suite's main() does when set-up itself throws: the error, the logs with QUIVER_EDGE_LOGS=1.
export function crashed(logs) {
  return (e) => {
    console.error(e);
    if (process.env.QUIVER_EDGE_LOGS) console.error(logs.join('\n'));
    process.exit(1);
  };
}

// Key layout v2's shared test namespace: a redis-server holding `ns` in layout v1 and a six-node
// cluster holding its copy in v2, both with the edge's Redis user (`edgePassword`), filled by the
// native fixture (tests/tools/layout_v2_fixture.cpp). `into.single` and `into.cluster` are set as
// each starts, so the caller's `finally` stops whatever did. The cluster's seed and the fixture's
// members (its JSON on stdout) come back.
export async function startLayoutV2Namespaces({ fixture, ns, password, edgePassword, into }) {
  into.single = await RedisServer.start({ password });
  const db = await into.single.client();
  await createEdgeUser(db, ns, edgePassword);
  db.close();
  into.cluster = await RedisCluster.start({ password });
  const { seed } = await into.cluster.prepareForEdges(ns, edgePassword);
  const made = spawnSync(fixture, ['--single', String(into.single.port), '--cluster', String(seed),
                                   '--ns', ns, '--now', String(Date.now()), '--password', password],
                         { encoding: 'utf8' });
  if (made.status !== 0) throw new Error(`the layout v2 fixture exited ${made.status}: ${made.stderr}`);
  return { seed, members: JSON.parse(made.stdout).members, summary: made.stdout.trim() };
}

// ---- a Redis Cluster ---------------------------------------------------------------------------

// A free loopback port whose cluster bus port (port + 10000) is free too.
async function freeClusterPort(taken) {
  for (;;) {
    const p = await freePort();
    if (p + 10000 > 65535 || taken.includes(p) || taken.includes(p + 10000)) continue;
    const busFree = await new Promise((resolve) => {
      const s = net.createServer();
      s.unref();
      s.once('error', () => resolve(false));
      s.listen(p + 10000, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (busFree) return p;
  }
}

// `INFO`-style text as {field: value}.
const infoFields = (text) => Object.fromEntries(String(text).split('\r\n')
  .filter((l) => l.includes(':')).map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1)]));

// A flat [key, value, ...] RESP2 map as an object.
// A RESP2 flat map ([k1, v1, k2, v2, ...], as CLUSTER SHARDS answers) as an object.
export const flatMap = (a) => {
  const o = {};
  for (let i = 0; i + 1 < a.length; i += 2) o[a[i]] = a[i + 1];
  return o;
};

// A real six-node Redis Cluster on loopback (three masters, three replicas), the way
// tests/support/redis_cluster.cpp makes one for the C++ tests: `redis-server --cluster-enabled
// yes` ×6, `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`, then waits until
// every node says cluster_state:ok and every replica is online. Every node has `password` for the
// default user; stop() ends every node.
export class RedisCluster {
  // `tls` ({ca, cert, key}, makeTestCertificates): the nodes listen for TLS only (`port 0`, each
  // port a `tls-port`), their bus and replication over TLS too (`tls-cluster yes`,
  // `tls-replication yes`; CLUSTER SHARDS then announces the TLS ports); clients are not asked for
  // certificates. client() and call() then speak TLS, verifying against `tls.ca`.
  static async start({ password, nodeTimeoutMs = 2000, tls = null } = {}) {
    const c = new RedisCluster();
    c.password = password;
    c.tls = tls;
    c.nodeTimeoutMs = nodeTimeoutMs;
    c.dir = mkdtempSync(path.join(os.tmpdir(), 'quiver-edge-cluster-'));
    c.ports = [];
    c.procs = new Map();
    for (let i = 0; i < 6; i++) c.ports.push(await freeClusterPort(c.ports));
    try {
      for (const port of c.ports) c.startNode(port);
      for (const port of c.ports) await c.untilListening(port);
      await c.cli('create', ...c.ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '1',
                  '--cluster-yes');
      await c.waitUntilOk();
    } catch (e) {
      await c.stop();
      throw e;
    }
    return c;
  }

  // A cluster-enabled redis-server on `port` (a fresh directory), not yet part of the cluster.
  startNode(port) {
    const { password, tls } = this;
    const dir = path.join(this.dir, String(port));
    mkdirSync(dir);
    const args = ['--port', tls ? '0' : String(port), '--bind', '127.0.0.1', '--save', '',
                  '--appendonly', 'no', '--dir', dir, '--cluster-enabled', 'yes',
                  '--cluster-config-file', path.join(dir, 'nodes.conf'),
                  '--cluster-node-timeout', String(this.nodeTimeoutMs),
                  '--repl-diskless-sync-delay', '0', '--repl-ping-replica-period', '1',
                  '--requirepass', password, '--masterauth', password];
    if (tls) {
      // The bus port stays the (TLS) port + 10000, as freeClusterPort checked.
      args.push('--tls-port', String(port), '--tls-cert-file', tls.cert, '--tls-key-file',
                tls.key, '--tls-ca-cert-file', tls.ca, '--tls-auth-clients', 'no',
                '--tls-cluster', 'yes', '--tls-replication', 'yes');
    }
    const proc = spawnTied('redis-server', args, { stdout: 'ignore' });
    proc.stderr.pipe(process.stderr);
    this.procs.set(port, { proc, exited: new Promise((resolve) => proc.once('exit', resolve)) });
  }

  async untilListening(port) {
    await waitFor(`redis-server on ${port}`, async () => {
      const r = await this.client(port);
      r.close();
      return true;
    });
  }

  // `redis-cli --cluster <args>` with the nodes' password, without blocking this process (a test
  // may read meanwhile): resolves with its output, rejects saying how it failed.
  cli(...args) {
    const tlsArgs = this.tls ? ['--tls', '--cacert', this.tls.ca] : [];
    return new Promise((resolve, reject) => {
      const child = spawn('redis-cli', ['--cluster', ...args, ...tlsArgs],
                          { env: { ...process.env, REDISCLI_AUTH: this.password },
                            stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (d) => { out += d; });
      child.stderr.on('data', (d) => { out += d; });
      child.once('error', reject);
      child.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(
        `redis-cli --cluster ${args[0]} exited ${code}: ${out}`))));
    });
  }

  // CLUSTER FORGET, at every live node, of every node marked failed (one kill() ended): as an
  // operator removes a dead node before `redis-cli --cluster` commands, which refuse to run while
  // a node is unreachable.
  async forgetFailed() {
    const alive = this.alive();
    const lines = String(await this.call(alive[0], 'CLUSTER', 'NODES')).trim().split('\n');
    const failed = lines.map((l) => l.split(' '))
      .filter((f) => f[2].split(',').includes('fail') && !f[2].includes('myself')).map((f) => f[0]);
    for (const id of failed) {
      for (const port of alive) await this.call(port, 'CLUSTER', 'FORGET', id);
    }
    return failed.length;
  }

  // A fourth master, empty (no slots, no replica), joined as `redis-cli --cluster add-node` does;
  // with `ns` and `edgePassword` the edge's ACL user is made on it (prepareForEdges). Its port.
  async addMaster({ ns = null, edgePassword = null } = {}) {
    const port = await freeClusterPort(this.ports);
    this.ports.push(port);
    this.startNode(port);
    await this.untilListening(port);
    if (ns) {
      const admin = await this.client(port);
      await createEdgeUser(admin, ns, edgePassword);
      admin.close();
    }
    await this.cli('add-node', `127.0.0.1:${port}`, `127.0.0.1:${this.alive()[0]}`);
    const id = await this.call(port, 'CLUSTER', 'MYID');
    await waitFor(`every node knows ${port}`, async () => {
      for (const p of this.alive()) {
        if (!String(await this.call(p, 'CLUSTER', 'NODES')).includes(id)) return false;
      }
      return true;
    }, 30000);
    // Until the new node, too, says cluster_state:ok (before, it answers CLUSTERDOWN).
    await this.waitUntilOk({ replicas: false });
    return port;
  }

  client(port) {
    return Redis.connect(port, this.password, '', { ca: this.tls?.ca });
  }

  // One command at `port`; the client is closed after.
  async call(port, ...args) {
    const r = await this.client(port);
    try {
      return await r.call(...args);
    } finally {
      r.close();
    }
  }

  alive() {
    return this.ports.filter((p) => this.procs.has(p));
  }

  // The shard serving `slot` now, as `port`'s CLUSTER SHARDS says: {master, replicas}.
  async shardOf(slot, port = this.alive()[0]) {
    for (const shard of await this.call(port, 'CLUSTER', 'SHARDS')) {
      const s = flatMap(shard);
      const ranges = s.slots;
      let owns = false;
      for (let i = 0; i + 1 < ranges.length; i += 2) owns ||= ranges[i] <= slot && slot <= ranges[i + 1];
      if (!owns) continue;
      // The port this client dials: a TLS-only node announces `tls-port` alone.
      const port = (n) => (this.tls ? n['tls-port'] : n.port);
      const nodes = s.nodes.map(flatMap);
      return { master: port(nodes.find((n) => n.role === 'master') ?? {}),
               replicas: nodes.filter((n) => n.role === 'replica' && n.health === 'online')
                 .map(port) };
    }
    return null;
  }

  // `INFO commandstats` of `port` as {command: calls}.
  async commandCalls(port) {
    const text = await this.call(port, 'INFO', 'commandstats');
    const out = {};
    for (const m of String(text).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) out[m[1]] = Number(m[2]);
    return out;
  }

  // Ready for edges of namespace `ns`: the edge's ACL user (password `edgePassword`) on every node
  // (ACL users are per node; a replica promoted later serves it too). Returns the namespace's
  // `slot`, its master `owner` and `seed`, a master that does not serve it.
  async prepareForEdges(ns, edgePassword) {
    for (const port of this.ports) {
      const admin = await this.client(port);
      await createEdgeUser(admin, ns, edgePassword);
      admin.close();
    }
    const slot = await this.call(this.ports[0], 'CLUSTER', 'KEYSLOT', `quiver:{${ns}}:namespace`);
    const owner = (await this.shardOf(slot)).master;
    const masters = [];
    for (const port of this.ports) {
      if ((await this.call(port, 'ROLE'))[0] === 'master') masters.push(port);
    }
    return { slot, owner, seed: masters.find((p) => p !== owner) };
  }

  // Every live node says cluster_state:ok, serves all slots, and sees three shards each with an
  // online replica (when `replicas`).
  async waitUntilOk({ replicas = true, timeoutMs = 30000 } = {}) {
    await waitFor('the cluster is ok', async () => {
      for (const port of this.alive()) {
        const info = infoFields(await this.call(port, 'CLUSTER', 'INFO'));
        if (info.cluster_state !== 'ok' || info.cluster_slots_ok !== '16384') return false;
        if (!replicas) continue;
        const shards = (await this.call(port, 'CLUSTER', 'SHARDS')).map(flatMap);
        if (shards.length !== 3) return false;
        for (const s of shards) {
          const nodes = s.nodes.map(flatMap);
          if (!nodes.some((n) => n.role === 'replica' && n.health === 'online')) return false;
        }
      }
      return true;
    }, timeoutMs);
  }

  // CLUSTER FAILOVER on `replica`: it becomes its shard's master (the old one answers MOVED).
  async failover(replica) {
    const ok = await this.call(replica, 'CLUSTER', 'FAILOVER');
    if (ok !== 'OK') throw new Error(`CLUSTER FAILOVER: ${ok}`);
    await waitFor(`${replica} becomes master`, async () =>
      (await this.call(replica, 'ROLE'))[0] === 'master', 30000);
  }

  // SIGKILL of the redis-server on `port` (not its tied wrapper: the process itself).
  async kill(port) {
    const pid = Number(infoFields(await this.call(port, 'INFO', 'server')).process_id);
    process.kill(pid, 'SIGKILL');
    const { exited } = this.procs.get(port);
    await exited;
    this.procs.delete(port);
  }

  async stop() {
    for (const { proc, exited } of this.procs.values()) await stopTied(proc, exited);
    this.procs.clear();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
