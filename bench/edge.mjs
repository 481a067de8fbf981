// Edge benchmark: quiver-edge against two baselines, side by side in one run, with wrk.
//
//   node bench/edge.mjs [--duration 5] [--warmup 5] [--members everything,realistic]
//                       [--edge-dir build/wasm/edge] [--write docs/benchmarks.md]
//
// Members (bench/edge_fixture.mjs): `everything`, one connection (GET of its manifest: the tools
// server-everything lists, one disabled), and `realistic`, 10 connections with ~20 KB manifests
// (GET /v1/manifests, ~200 KB). Targets, all in workerd on this machine, all answering the same
// bytes for the member's path:
//   edge, L1 hit      quiver-edge with a long L1 TTL: token check + render from the in-isolate copy
//   edge, Redis hit   quiver-edge with L1 off (TTL 0): token check + one Redis round trip (a new
//                     connection, AUTH, the discovery script as a conditional read: the isolate's
//                     copy checked against the versions, answered "unchanged", one MGET in Redis)
//                     + render, every request; the edge's /healthz must count them revalidated
//   edge, full read   the same with conditional reads off (QUIVER_L1_VALIDATE_MAX_AGE_MS=0): the
//                     whole script every request
//   plain JS          a worker returning the same bytes from memory: the runtime's floor
//   JS + Redis GET    a hand-written worker: connect, AUTH, GET the same bytes, return them
// at 1 and 16 connections (keep-alive), p50 / p99 latency and requests/s, as wrk reports them.
// Needs wrk (Debian package `wrk`), redis-server and the npm workerd (scripts/setup.sh).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { argValue, edgeDirArg, repoRoot } from '../tests/edge/harness.mjs';
import { PATHS, startEdgeFixture, startMemberBaselines } from './edge_fixture.mjs';
import { hasWrk, machineLine, printRow, wrk, wrkVersion, writeSection } from './report.mjs';

const arg = argValue;
const duration = Number(arg('--duration', '5'));
// Seconds of load each target gets before its rows are measured (0: none). V8 compiles the edge's
// wasm in tiers while it runs: in a profile, ~50 us of CPU per request went to compiling in the
// background 2 s into the load, ~10 us after 8 s. The rows measure serving isolates, not their
// first seconds; every target gets the same warm-up.
const warmup = Number(arg('--warmup', '5'));
const members = arg('--members', 'everything').split(',');
const edgeDir = edgeDirArg();
const writeTo = arg('--write', '');


if (!hasWrk()) {
  console.error('bench/edge.mjs needs wrk: scripts/setup.sh --bench');
  process.exit(2);
}

async function runMember(member, logs) {
  const fx = await startEdgeFixture({ edgeDir, member, logs });
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'quiver-edge-bench-'));
  const rows = [];
  try {
    const { target, headers, sample, plain, redisGet } =
      await startMemberBaselines(fx, member, tmp, logs);

    const targets = [
      ['quiver-edge, L1 hit', fx.edgeL1, headers],
      ['quiver-edge, Redis hit (L1 off: conditional read)', fx.edgeRedis, headers],
      ['quiver-edge, Redis full read (L1 and checks off)', fx.edgeFull, headers],
      ['plain JS response (same bytes)', plain, {}],
      ['hand-written JS: connect + AUTH + GET', redisGet, {}],
    ];
    for (const [, server, h] of targets) {
      if (warmup > 0) wrk({ port: server.port, path: target, connections: 16, duration: warmup, headers: h });
    }
    for (const connections of [1, 16]) {
      for (const [name, server, h] of targets) {
        const r = wrk({ port: server.port, path: target, connections, duration, headers: h });
        rows.push({ member, name, connections, bytes: Buffer.byteLength(sample.text), ...r });
        printRow(`${member}: ${name}`, connections, r);
      }
    }
    // The Redis-hit row measured what it says: the checked copy answered (nothing changed).
    // (A fresh connection: wrk's load may leave the last keep-alive socket closing.)
    let health;
    for (let attempt = 0; attempt < 3 && !health; attempt++) {
      health = await fx.edgeRedis.request('GET', '/healthz', { headers: { connection: 'close' } })
        .catch((e) => { console.error(`healthz: ${e.message}`); return undefined; });
      if (!health) await new Promise((r) => setTimeout(r, 500));
    }
    if (!(health?.json?.l1?.revalidated > 0) || health.json.l1.revalidate_changed !== 0) {
      throw new Error(`the Redis hit row did not exercise conditional reads: ${health.text}`);
    }
  } finally {
    await fx.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
  return rows;
}

async function main() {
  const logs = [];
  const rows = [];
  for (const member of members) rows.push(...await runMember(member, logs));
  if (writeTo) writeSection(writeTo, 'Edge', sectionLines(rows));
}

function sectionLines(rows) {
  const workerdVersion = execFileSync(
    path.join(repoRoot, 'build', 'node', 'node_modules', '.bin', 'workerd'), ['--version'],
    { encoding: 'utf8' }).trim();
  const find = (r, prefix) => rows.find((x) => x.member === r.member &&
    x.connections === r.connections && x.name.startsWith(prefix));
  const described = members.map((m) => `\`${m}\`: \`GET ${PATHS[m]}\`, ` +
    `${rows.find((r) => r.member === m).bytes} bytes`).join('; ');
  return [
    '',
    `\`node bench/edge.mjs --duration ${duration} --warmup ${warmup} ` +
      `--members ${members.join(',')}\`, ` +
      `${new Date().toISOString().slice(0, 10)}:`,
    `${machineLine()}, ${workerdVersion}, wrk ${wrkVersion()}, redis-server on loopback.`,
    'One wrk thread, keep-alive; workerd, Redis and wrk share the machine (and other builds).',
    `Each target served ${warmup} s of load (16 connections) before its rows were measured.`,
    `Every target of a member answers the same bytes (${described}).`,
    '',
    '| member | target | conns | p50 ms | p99 ms | req/s | vs plain JS (req/s) | ' +
      'vs hand-written Redis GET (req/s) |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map((r) => `| ${r.member} | ${r.name} | ${r.connections} | ${r.p50.toFixed(3)} | ` +
      `${r.p99.toFixed(3)} | ${r.rps.toFixed(0)} | ${(r.rps / find(r, 'plain').rps).toFixed(2)} | ` +
      `${(r.rps / find(r, 'hand-written').rps).toFixed(2)} |` +
      `${r.errors ? ` (${r.errors} non-2xx)` : ''}`),
  ];
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
