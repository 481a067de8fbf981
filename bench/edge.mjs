// Edge benchmark: quiver-edge against two baselines, side by side in one run, with wrk.
//
//   node bench/edge.mjs [--duration 5] [--edge-dir build/wasm/edge] [--write docs/benchmarks.md]
//
// Targets, all in workerd on this machine, all answering GET of one connection's manifest (the
// tools server-everything lists):
//   edge, L1 hit      quiver-edge with a long L1 TTL: token check + render from the in-isolate copy
//   edge, Redis hit   quiver-edge with L1 off: token check + one Redis round trip (a new
//                     connection, AUTH, the discovery script) + render, every request
//   plain JS          a worker returning the same bytes from memory: the runtime's floor
//   JS + Redis GET    a hand-written worker: connect, AUTH, GET the same bytes, return them
// at 1 and 16 connections (keep-alive), p50 / p99 latency and requests/s, as wrk reports them.
// Needs wrk (Debian package `wrk`), redis-server and the npm workerd (scripts/setup.sh).
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import {
  Layout, RedisServer, Workerd, connectionCommands, everythingTools, manifestCommands,
  argValue, edgeDirArg, manifestJson, mintToken, repoRoot,
} from '../tests/edge/harness.mjs';

const arg = argValue;
const duration = Number(arg('--duration', '5'));
const edgeDir = edgeDirArg();
const writeTo = arg('--write', '');

const KID = 'bench';
const SECRET = 'quiver-edge-benchmark-secret-0123456789';
const PASSWORD = 'bench-redis-password';
const NS = 'bench';
const PATH = '/v1/mcp-connections/everything/manifest';
const BODY_KEY = 'bench:body';

if (spawnSync('wrk', ['--version']).error) {
  console.error('bench/edge.mjs needs wrk: apt-get install -y wrk');
  process.exit(2);
}

function parseDuration(text) {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(text);
  if (!m) return NaN;
  return Number(m[1]) * { us: 0.001, ms: 1, s: 1000, m: 60000 }[m[2]];
}

function wrk(port, connections, headers) {
  const cmd = ['-t1', `-c${connections}`, `-d${duration}s`, '--latency', '--timeout', '5s'];
  for (const [k, v] of Object.entries(headers)) cmd.push('-H', `${k}: ${v}`);
  cmd.push(`http://127.0.0.1:${port}${PATH}`);
  const out = execFileSync('wrk', cmd, { encoding: 'utf8' });
  const pct = (p) => parseDuration(new RegExp(`^\\s+${p}%\\s+(\\S+)`, 'm').exec(out)?.[1] ?? '');
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]);
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0);
  const socketErrors = /Socket errors:.*/.exec(out)?.[0] ?? '';
  return { p50: pct(50), p99: pct(99), rps, errors: non2xx, socketErrors };
}

async function main() {
  const logs = [];
  const redis = await RedisServer.start({ password: PASSWORD });
  const db = await redis.client();
  const layout = new Layout(NS);
  await db.pipeline([
    ...connectionCommands(layout, 'everything', 'shared'),
    ['SADD', layout.grants('bench'), 'everything'],
    ...manifestCommands(layout, 'everything', 'shared', manifestJson(everythingTools())),
    ['SADD', layout.disabled('everything'), 'tool:echo'],
  ]);
  const edgeEnv = (ttl) => ({
    QUIVER_TOKEN_KEYS: JSON.stringify({ [KID]: SECRET }), QUIVER_NAMESPACE: NS,
    QUIVER_L1_TTL_MS: String(ttl), REDIS_PORT: String(redis.port), REDIS_PASSWORD: PASSWORD,
  });
  const config = path.join(edgeDir, 'workerd.capnp');
  const servers = [];
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'quiver-edge-bench-'));
  try {
    const edgeL1 = await Workerd.start({ config, env: edgeEnv(600_000), logs });
    servers.push(edgeL1);
    const edgeRedis = await Workerd.start({ config, env: edgeEnv(0), logs });
    servers.push(edgeRedis);

    const token = mintToken({ member: 'bench', kid: KID, secret: SECRET, ttlMs: 3600_000 });
    const headers = { Authorization: `Bearer ${token}` };
    const sample = await edgeL1.request('GET', PATH, { headers });
    if (sample.status !== 200) throw new Error(`edge answered ${sample.status}: ${sample.text}`);
    await db.call('SET', BODY_KEY, sample.text);

    // The baselines: one workerd, two workers, two sockets.
    for (const f of ['plain.mjs', 'redis-get.mjs']) {
      copyFileSync(path.join(repoRoot, 'bench', 'workers', f), path.join(tmp, f));
    }
    writeFileSync(path.join(tmp, 'baselines.capnp'), `\
using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "plain", worker = (modules = [(name = "plain.mjs", esModule = embed "plain.mjs")],
      compatibilityDate = "2024-09-23",
      bindings = [(name = "BODY", fromEnvironment = "BODY")])),
    (name = "redis-get", worker = (
      modules = [(name = "redis-get.mjs", esModule = embed "redis-get.mjs")],
      compatibilityDate = "2024-09-23", globalOutbound = "net",
      bindings = [(name = "REDIS_HOST", text = "127.0.0.1"),
                  (name = "REDIS_PORT", fromEnvironment = "REDIS_PORT"),
                  (name = "REDIS_PASSWORD", fromEnvironment = "REDIS_PASSWORD"),
                  (name = "KEY", text = "${BODY_KEY}")])),
    (name = "net", network = (allow = ["local"])),
  ],
  sockets = [
    (name = "http", address = "127.0.0.1:0", http = (), service = "plain"),
    (name = "redis", address = "127.0.0.1:0", http = (), service = "redis-get"),
  ],
);
`);
    const plain = await Workerd.start({ config: path.join(tmp, 'baselines.capnp'), logs,
                                        env: { BODY: sample.text, REDIS_PORT: String(redis.port),
                                               REDIS_PASSWORD: PASSWORD } });
    servers.push(plain);
    // The same config again, serving the other socket: each baseline has a process to itself.
    const redisGetProc = await Workerd.start({
      config: path.join(tmp, 'baselines.capnp'), logs, socket: 'redis',
      env: { BODY: '', REDIS_PORT: String(redis.port), REDIS_PASSWORD: PASSWORD } });
    servers.push(redisGetProc);

    const check = await redisGetProc.request('GET', PATH);
    if (check.text !== sample.text) {
      throw new Error(`the Redis GET baseline answered ${check.status}`);
    }

    const targets = [
      ['quiver-edge, L1 hit', edgeL1, headers],
      ['quiver-edge, Redis hit (L1 off)', edgeRedis, headers],
      ['plain JS response (same bytes)', plain, {}],
      ['hand-written JS: connect + AUTH + GET', redisGetProc, {}],
    ];
    const rows = [];
    for (const connections of [1, 16]) {
      for (const [name, server, h] of targets) {
        const r = wrk(server.port, connections, h);
        rows.push({ name, connections, ...r });
        console.log(`${name.padEnd(40)} c=${String(connections).padStart(2)}` +
                    `  p50 ${r.p50.toFixed(3)} ms` +
                    `  p99 ${r.p99.toFixed(3)} ms  ${r.rps.toFixed(0)} req/s` +
                    `${r.errors ? `  NON-2XX ${r.errors}` : ''} ${r.socketErrors}`);
      }
    }
    const body = Buffer.byteLength(sample.text);
    if (writeTo) writeSection(writeTo, rows, body);
  } finally {
    db.close();
    for (const s of servers.reverse()) await s.stop();
    await redis.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

function writeSection(file, rows, bodyBytes) {
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  const wrkVersion = /wrk (\S+)/.exec(spawnSync('wrk', ['--version'], { encoding: 'utf8' }).stdout)
    ?.[1] ?? '?';
  const workerdVersion = execFileSync(
    path.join(repoRoot, 'build', 'node', 'node_modules', '.bin', 'workerd'), ['--version'],
    { encoding: 'utf8' }).trim();
  const base = (c) => rows.find((r) => r.connections === c && r.name.startsWith('plain'));
  const lines = [
    '## Edge',
    '',
    `\`node bench/edge.mjs --duration ${duration}\`, ${new Date().toISOString().slice(0, 10)}:`,
    `${os.cpus().length} × ${cpu}, ${workerdVersion}, wrk ${wrkVersion}, redis-server on loopback.`,
    'One wrk thread, keep-alive; workerd, Redis and wrk share the machine (and other builds).',
    `Every target answers \`GET ${PATH}\``,
    `with the same ${bodyBytes}-byte body: the tools server-everything lists, one disabled.`,
    '',
    '| target | conns | p50 ms | p99 ms | req/s | vs plain JS (req/s) |',
    '| --- | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map((r) => `| ${r.name} | ${r.connections} | ${r.p50.toFixed(3)} | ` +
      `${r.p99.toFixed(3)} | ${r.rps.toFixed(0)} | ` +
      `${(r.rps / base(r.connections).rps).toFixed(2)} |` +
      `${r.errors ? ` (${r.errors} non-2xx)` : ''}`),
    '',
  ];
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    text = '# Benchmarks\n\n';
  }
  const start = text.indexOf('## Edge\n');
  let section = lines.join('\n');
  if (start >= 0) {
    const next = text.indexOf('\n## ', start + 1);
    const notes = text.slice(start, next < 0 ? text.length : next);
    const keep = notes.indexOf('\n### ');  // hand-written notes under the table stay
    if (keep >= 0) section += notes.slice(keep + 1);
    text = text.slice(0, start) + section + (next < 0 ? '' : text.slice(next + 1));
  } else {
    text = `${text.trimEnd()}\n\n${section}`;
  }
  writeFileSync(file, text.endsWith('\n') ? text : `${text}\n`);
  console.log(`wrote the Edge section of ${file}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
