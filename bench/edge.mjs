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
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import {
  Layout, RedisServer, Workerd, connectionCommands, everythingTools, manifestCommands,
  argValue, edgeDirArg, manifestJson, mintToken, repoRoot,
} from '../tests/edge/harness.mjs';
import { hasWrk, machineLine, printRow, wrk, wrkVersion, writeSection } from './report.mjs';

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

if (!hasWrk()) {
  console.error('bench/edge.mjs needs wrk: scripts/setup.sh --bench');
  process.exit(2);
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
        const r = wrk({ port: server.port, path: PATH, connections, duration, headers: h });
        rows.push({ name, connections, ...r });
        printRow(name, connections, r);
      }
    }
    const body = Buffer.byteLength(sample.text);
    if (writeTo) writeSection(writeTo, 'Edge', sectionLines(rows, body));
  } finally {
    db.close();
    for (const s of servers.reverse()) await s.stop();
    await redis.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

function sectionLines(rows, bodyBytes) {
  const workerdVersion = execFileSync(
    path.join(repoRoot, 'build', 'node', 'node_modules', '.bin', 'workerd'), ['--version'],
    { encoding: 'utf8' }).trim();
  const base = (c) => rows.find((r) => r.connections === c && r.name.startsWith('plain'));
  return [
    '',
    `\`node bench/edge.mjs --duration ${duration}\`, ${new Date().toISOString().slice(0, 10)}:`,
    `${machineLine()}, ${workerdVersion}, wrk ${wrkVersion()}, redis-server on loopback.`,
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
  ];
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
