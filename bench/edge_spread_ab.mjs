// A/B of two edge builds on key layout v2 (docs/benchmarks.md, "A spread round in one round
// trip"): the same v2 namespace in one real six-node cluster (three masters; the namespace a real
// store wrote, copied by tests/tools/layout_v2_fixture.cpp, as tests/edge/layout_v2.mjs does),
// read past the L1 TTL by a v2 edge of build A and one of build B, the requests interleaved (the
// order alternating every iteration) so that the load of a shared machine drifts over both alike.
//
//   node bench/edge_spread_ab.mjs --a <edge dir A> --b <edge dir B>
//        --fixture build/native/tests/quiver_layout_v2_fixture [--n 200] [--rtt-ms 0]
//
// Two kinds of read, each by its own pair of edges: conditional (the default past the TTL: the
// versions, one spread round) and full (QUIVER_L1_VALIDATE_MAX_AGE_MS=1: round 1 on the member's
// slot, round 2 spread over the page's slots). Per edge: p50, p90 and mean latency of the HTTP
// request, and the Redis writes (host round trips) per read, counted by a line each copy of
// worker.mjs logs before each write. The builds are copied into a temporary directory and only
// the copies are changed: that log line, and with --rtt-ms a wait of that long before every
// socket read (a network round trip between the edge and Redis, which loopback does not have;
// reads of one step in parts wait it at once, as their sockets would).
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import {
  argValue, edgeEnv, mintToken, sleep, startEdges, startLayoutV2Namespaces,
} from '../tests/edge/harness.mjs';

const dirA = argValue('--a', '');
const dirB = argValue('--b', '');
const fixture = argValue('--fixture', '');
const n = Number(argValue('--n', '200'));
const rttMs = Number(argValue('--rtt-ms', '0'));
if (!dirA || !dirB || !fixture) {
  console.error('usage: node bench/edge_spread_ab.mjs --a DIR --b DIR --fixture BIN [--n 200] [--rtt-ms 0]');
  process.exit(2);
}

const NS = 'spread';
const KID = 'spread-1';
const SECRET = 'edge-spread-ab-caller-token-secret-0123456789';
const REDIS_PASSWORD = 'edge-spread-ab-redis-password';
const EDGE_REDIS_PASSWORD = 'edge-spread-ab-edge-redis-password';
const L1_TTL_MS = 50;
const MARK = 'QUIVER_BENCH_WRITE';

// A copy of the staged edge in `dir` whose worker.mjs logs each Redis write (and waits rttMs
// before each socket read). Fails when the anchors are not found: the counts would be wrong.
function instrumented(dir, into) {
  cpSync(dir, into, { recursive: true });
  const file = path.join(into, 'worker.mjs');
  let s = readFileSync(file, 'utf8');
  const edit = (anchor, replacement, required = true) => {
    if (!s.includes(anchor)) {
      assert.ok(!required, `${dir}/worker.mjs: no "${anchor.trim().split('\n')[0]}"`);
      return;
    }
    s = s.replace(anchor, replacement);
  };
  edit('        const address = nodeAddress(step.node);\n',
       `        const address = nodeAddress(step.node);\n        console.log('${MARK} one');\n`);
  edit('        if (step.parts) {\n',
       `        if (step.parts) {\n          console.log('${MARK} parts');\n`, false);
  if (rttMs > 0) {
    edit('  async read(blocksMs = 0) {\n',
         `  async read(blocksMs = 0) {\n    await new Promise((r) => setTimeout(r, ${rttMs}));\n`);
  }
  writeFileSync(file, s);
  return into;
}

const stats = (ms) => {
  const s = [...ms].sort((x, y) => x - y);
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return { p50: q(0.5), p90: q(0.9), mean: s.reduce((x, y) => x + y, 0) / s.length };
};
const fmt = (o) => `p50 ${o.p50.toFixed(2)} ms, p90 ${o.p90.toFixed(2)} ms, mean ${o.mean.toFixed(2)} ms`;

const tmp = mkdtempSync(path.join(os.tmpdir(), 'quiver-spread-ab-'));
let single;
let cluster;
const edges = [];
try {
  const a = instrumented(dirA, path.join(tmp, 'a'));
  const b = instrumented(dirB, path.join(tmp, 'b'));
  const servers = {};
  let made;
  try {
    made = await startLayoutV2Namespaces({ fixture, ns: NS, password: REDIS_PASSWORD,
                                           edgePassword: EDGE_REDIS_PASSWORD, into: servers });
  } finally {
    ({ single, cluster } = servers);
  }
  const { seed, members } = made;
  const common = { ns: NS, kid: KID, secret: SECRET, edgeRedisPassword: EDGE_REDIS_PASSWORD,
                   l1TtlMs: L1_TTL_MS, redisPort: seed };
  const kinds = {
    conditional: { REDIS_CLUSTER: '1' },
    full: { REDIS_CLUSTER: '1', QUIVER_L1_VALIDATE_MAX_AGE_MS: '1' },
  };
  const runs = [];
  for (const [kind, extra] of Object.entries(kinds)) {
    for (const [build, dir] of [['A', a], ['B', b]]) {
      const logs = [];
      const [edge] = await startEdges(1, { edgeDir: dir, logs, env: edgeEnv({ ...common, extra }) });
      edges.push(edge);
      runs.push({ kind, build, edge, logs, ms: [] });
    }
  }
  // The member tests/edge/layout_v2.mjs measures: its page spans the three masters.
  const headers = { authorization: `Bearer ${mintToken({ member: members[2], kid: KID, secret: SECRET })}` };
  const read = async (run, keep) => {
    const t0 = process.hrtime.bigint();
    const res = await run.edge.request('GET', '/v1/manifests', { headers });
    if (keep) run.ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
    assert.equal(res.status, 200, res.text);
  };
  // Warm-up: each edge learns the map and keeps a copy; its writes are not counted.
  for (const run of runs) {
    await read(run, false);
    run.logs.length = 0;
  }
  for (let i = 0; i < n; i++) {
    await sleep(L1_TTL_MS + 10);
    const order = i % 2 ? [1, 0, 3, 2] : [0, 1, 2, 3];
    for (const k of order) await read(runs[k], true);
  }
  console.log(`${n} reads per edge, past the L1 TTL (${L1_TTL_MS} ms), interleaved; ` +
              `simulated round trip ${rttMs} ms`);
  for (const kind of Object.keys(kinds)) {
    const [ra, rb] = runs.filter((r) => r.kind === kind);
    const sa = stats(ra.ms);
    const sb = stats(rb.ms);
    for (const [r, st] of [[ra, sa], [rb, sb]]) {
      const writes = r.logs.filter((l) => l.includes(MARK));
      const parts = writes.filter((l) => l.includes(`${MARK} parts`)).length;
      console.log(`  ${kind.padEnd(11)} ${r.build}: ${fmt(st)}; ` +
                  `${(writes.length / n).toFixed(2)} Redis writes per read (${(parts / n).toFixed(2)} in parts)`);
    }
    console.log(`  ${kind.padEnd(11)} B/A: p50 ${(sb.p50 / sa.p50).toFixed(2)}, mean ${(sb.mean / sa.mean).toFixed(2)}`);
  }
} finally {
  for (const w of edges) await w?.stop();
  await cluster?.stop();
  await single?.stop();
  rmSync(tmp, { recursive: true, force: true });
}
process.exit(0);
