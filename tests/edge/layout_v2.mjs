// The edge reads a namespace in key layout v2 (issue 14; docs/design.md "The discovery read on v2,
// round by round"):
//
//   the real agent store (RedisStore) writes a namespace on one redis-server (layout v1) →
//   copy_namespace_to_v2 copies it into six redis-servers in cluster mode, then the layout record
//   says v2:ready (tests/tools/layout_v2_fixture.cpp) →
//   one quiver-edge in workerd on the single node, two on the cluster (REDIS_CLUSTER=1) → HTTP
//
//   node tests/edge/layout_v2.mjs [--edge-dir build/wasm/edge] --fixture .../quiver_layout_v2_fixture
//
// Registered as the ctest `wasm.edge_layout_v2`. Exit status 0 when every test passed, 77 when the
// fixture, redis-server or redis-cli is absent. The tests: every member's GET /v1/manifests (and a
// POST /mcp tools/list) at both cluster edges is byte for byte the single node edge's answer,
// headers included but those that differ per request (X-Request-Id) or per clock second (Date,
// Age); a second read past the L1 TTL is a conditional read answered `revalidated`, and a write to
// one connection on the cluster (its manifest's etag, and its version INCRed, by plain commands)
// changes the next read; a relayed tools/call goes to its connection's shard (AGENT_UNREACHABLE:
// no agent runs here).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';

import {
  EDGE_REDIS_USER, Redis, argValue, crashed, edgeDirArg, edgeEnv, finish, mintToken,
  runTests, skipUnlessInstalled, sleep, startEdges, startLayoutV2Namespaces,
} from './harness.mjs';

const edgeDir = edgeDirArg();
const only = argValue('--only', '');
const fixture = argValue('--fixture', '');

const NS = 'spread';
const KID = 'spread-1';
const SECRET = 'layout-v2-e2e-caller-token-secret-0123456789';
const REDIS_PASSWORD = 'layout-v2-redis-password';
const EDGE_REDIS_PASSWORD = 'layout-v2-edge-redis-password';
const L1_TTL_MS = 50;

let single;        // RedisServer: layout v1
let cluster;       // RedisCluster: the copy, layout v2
let v1Edge;        // Workerd on `single`
const v2Edges = [];  // Workerd × 2 on `cluster`
const logs = [];
let members = [];
let seed;           // a master of `cluster`, the v2 edges' seed
const auth = (member) => ({ authorization: `Bearer ${mintToken({ member, kid: KID, secret: SECRET })}` });

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

// What is comparable between two edges' answers to one request: the status, the body's bytes, and
// every header but those that differ per request (X-Request-Id: random) or per second (Date, Age).
// In the body, the two numbers computed from the clock at the moment of the answer (an entry's
// `age_ms`, now − fetched_at, and /mcp's `ttlMs`, fresh_until − now) are blanked: two answers a
// few milliseconds apart differ there whatever they were read from, and so does Content-Length
// (an age of 9 ms and one of 10 ms differ by a digit): it is checked against the answer's own
// bytes instead. Everything else, the ETag header included, is compared byte for byte.
const VOLATILE = new Set(['x-request-id', 'date', 'age', 'content-length']);
const clockless = (text) => text.replace(/"(age_ms|ttlMs)":\d+/g, '"$1":0');
function comparable(res) {
  const length = res.headers['content-length'];
  if (length !== undefined) assert.equal(Number(length), Buffer.byteLength(res.text), 'Content-Length');
  const headers = Object.entries(res.headers).filter(([k]) => !VOLATILE.has(k)).sort();
  return { status: res.status, headers, body: clockless(res.text) };
}

async function healthz(w) {
  return (await w.request('GET', '/healthz')).json;
}

test('every member\'s discovery at both v2 edges is the v1 edge\'s, byte for byte', async () => {
  for (const m of members) {
    const want = await v1Edge.request('GET', '/v1/manifests', { headers: auth(m) });
    assert.equal(want.status, 200, want.text);
    assert.ok(want.json.connections.length > 0, `${m} sees connections`);
    for (const w of v2Edges) {
      const got = await w.request('GET', '/v1/manifests', { headers: auth(m) });
      assert.deepEqual(comparable(got), comparable(want), `${m}`);
    }
    // One connection by id, and a page of one.
    const cid = want.json.connections[0].id;
    for (const p of [`/v1/mcp-connections/${cid}/manifest`, '/v1/manifests?limit=1']) {
      const one = await v1Edge.request('GET', p, { headers: auth(m) });
      for (const w of v2Edges) {
        assert.deepEqual(comparable(await w.request('GET', p, { headers: auth(m) })), comparable(one),
                         `${m} ${p}`);
      }
    }
  }
  for (const w of v2Edges) {
    const h = await healthz(w);
    assert.equal(h.layout.reads, 'v2', JSON.stringify(h.layout));
  }
  // The namespace is spread: every master ran some of the rounds' one-slot scripts.
  for (const port of cluster.ports) {
    if ((await cluster.call(port, 'ROLE'))[0] !== 'master') continue;
    const calls = await cluster.commandCalls(port);
    assert.ok((calls.evalsha_ro ?? 0) + (calls.eval_ro ?? 0) > 0, `${port}: ${JSON.stringify(calls)}`);
  }
  assert.equal((await healthz(v1Edge)).layout.reads, 'v1');
});

test('a POST /mcp tools/list at both v2 edges is the v1 edge\'s', async () => {
  const post = (w) => w.request('POST', '/mcp', {
    headers: { ...auth(members[0]), 'content-type': 'application/json',
               accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/list', params: {} }) });
  const want = await post(v1Edge);
  assert.equal(want.status, 200, want.text);
  assert.ok(want.text.includes('x_conn-'), want.text);
  for (const w of v2Edges) assert.deepEqual(comparable(await post(w)), comparable(want));
});

// The cluster's master for `key`, and a command there as the default user.
async function onKey(key, ...args) {
  const slot = await cluster.call(cluster.ports[0], 'CLUSTER', 'KEYSLOT', key);
  const { master } = await cluster.shardOf(slot);
  return cluster.call(master, ...args);
}

test('past the TTL a v2 read is conditional: revalidated, then changed by a write to one connection', async () => {
  const m = members[1];
  const w = v2Edges[0];
  const first = await w.request('GET', '/v1/manifests', { headers: auth(m) });
  assert.equal(first.status, 200, first.text);
  await sleep(L1_TTL_MS * 3);
  const before = await healthz(w);
  const again = await w.request('GET', '/v1/manifests', { headers: auth(m) });
  assert.equal(again.headers['x-quiver-cache'], 'revalidated', again.text);
  assert.equal(clockless(again.text), clockless(first.text));
  assert.equal((await healthz(w)).l1.revalidated, before.l1.revalidated + 1);

  // A shared connection m sees: its manifest's etag changed and its version moved, as a commit
  // does, by plain commands on the connection's slot.
  const target = first.json.connections.find((c) => c.manifest && !c.id.endsWith('-0') &&
                                                     !c.id.endsWith('-4') && !c.id.endsWith('-8'));
  assert.ok(target, first.text);
  const tag = `{${NS}:c:${target.id}}`;
  assert.equal(await onKey(`quiver:${tag}:manifest`, 'HSET', `quiver:${tag}:manifest`, 'etag',
                           'sha256-changed-by-the-test'), 0);
  await onKey(`quiver:${tag}:version`, 'INCR', `quiver:${tag}:version`);
  await sleep(L1_TTL_MS * 3);
  const changed = await w.request('GET', '/v1/manifests', { headers: auth(m) });
  assert.equal(changed.status, 200, changed.text);
  assert.equal(changed.headers['x-quiver-cache'], 'miss', 'read in full');
  const entry = changed.json.connections.find((c) => c.id === target.id);
  assert.equal(entry.etag, 'sha256-changed-by-the-test', JSON.stringify(entry));
  assert.equal((await healthz(w)).l1.revalidate_changed, before.l1.revalidate_changed + 1);
  // The other v2 edge, whose copy predates the write, sees it too at its next read.
  await sleep(L1_TTL_MS * 3);
  const other = await v2Edges[1].request('GET', '/v1/manifests', { headers: auth(m) });
  assert.equal(other.json.connections.find((c) => c.id === target.id).etag,
               'sha256-changed-by-the-test');
});

test('a relayed tools/call on v2 goes to its connection\'s shard: AGENT_UNREACHABLE with no agent', async () => {
  const w = v2Edges[1];
  const res = await w.request('POST', '/mcp', {
    headers: { ...auth(members[0]), 'content-type': 'application/json',
               accept: 'application/json', 'mcp-protocol-version': '2025-06-18' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/call',
                           params: { name: 'conn-1__x_conn-1', arguments: {} } }) });
  const text = res.text;
  // No agent runs in this suite: the shard's call-agents mark is absent, so the v2 script answers
  // at once.
  assert.ok(/AGENT_UNREACHABLE/.test(text), `${res.status} ${text}`);
  // No v1 key of the namespace but the namespace-wide records the copy keeps: no calls stream.
  for (const port of cluster.ports) {
    const [, keys] = await cluster.call(port, 'SCAN', '0', 'MATCH', `quiver:{${NS}}:call*`, 'COUNT', '1000');
    assert.deepEqual(keys, [], `${port}`);
  }
});

test('the edge\'s Redis user reads the v2 records and grants and writes none of them', async () => {
  const cid = 'conn-1';
  const keys = [`quiver:{${NS}:c:${cid}}:conn`, `quiver:{${NS}:m:${members[0]}}:grants`];
  for (const key of keys) {
    const slot = await cluster.call(cluster.ports[0], 'CLUSTER', 'KEYSLOT', key);
    const { master } = await cluster.shardOf(slot);
    const edge = await Redis.connect(master, EDGE_REDIS_PASSWORD, EDGE_REDIS_USER);
    try {
      assert.equal(await edge.call('EXISTS', key), 1, key);
      await assert.rejects(edge.call('SET', key, '1'), /NOPERM/, key);
      // A shard's keys (streams, registries) are not the edge's on v2.
      const shard = `quiver:{${NS}:s:0}:conns`;
      await assert.rejects(edge.call('EXISTS', shard), /NOPERM/, shard);
    } finally {
      edge.close();
    }
  }
});

// Measured, not asserted: the latency of a read past the L1 TTL (a conditional read answered
// `revalidated`) at the v1 edge (one script, one round trip) and at a v2 edge (one GET per slot
// held, the nodes written one after the other).
test('measured: reads past the L1 TTL at the v1 edge and at a v2 edge', async () => {
  const m = members[2];
  const timings = async (w) => {
    const ms = [];
    for (let i = 0; i < 40; i++) {
      await sleep(L1_TTL_MS + 10);
      const t0 = process.hrtime.bigint();
      const res = await w.request('GET', '/v1/manifests', { headers: auth(m) });
      ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
      assert.equal(res.status, 200, res.text);
    }
    ms.sort((a, b) => a - b);
    return `p50 ${ms[20].toFixed(2)} ms, p90 ${ms[36].toFixed(2)} ms`;
  };
  console.log(`      v1 edge (one node): ${await timings(v1Edge)}; v2 edge (three masters): ` +
              `${await timings(v2Edges[0])}`);
});

// ---- runner ------------------------------------------------------------------------------------

async function main() {
  if (!fixture || !existsSync(fixture)) {
    console.log(`SKIP: the fixture binary (${fixture || '--fixture'}) is not built`);
    process.exit(77);
  }
  skipUnlessInstalled('redis-server', ['--version']);
  skipUnlessInstalled('redis-cli', ['--version']);
  const started = Date.now();
  let failed = 0;
  try {
    const servers = {};
    try {
      const made = await startLayoutV2Namespaces({ fixture, ns: NS, password: REDIS_PASSWORD,
                                                   edgePassword: EDGE_REDIS_PASSWORD, into: servers });
      ({ members, seed } = made);
      console.log(`      fixture: ${made.summary}`);
    } finally {
      ({ single, cluster } = servers);
    }
    const common = { ns: NS, kid: KID, secret: SECRET, edgeRedisPassword: EDGE_REDIS_PASSWORD,
                     l1TtlMs: L1_TTL_MS };
    [v1Edge] = await startEdges(1, { edgeDir, logs, env: edgeEnv({ ...common, redisPort: single.port }) });
    v2Edges.push(...await startEdges(2, { edgeDir, logs, env: edgeEnv({
      ...common, redisPort: seed, extra: { REDIS_CLUSTER: '1' } }) }));
    failed += await runTests(tests, only);
  } finally {
    for (const w of [v1Edge, ...v2Edges]) await w?.stop();
    await cluster?.stop();
    await single?.stop();
  }
  finish({ failed, count: tests.length, started, logs,
           secrets: [SECRET, REDIS_PASSWORD, EDGE_REDIS_PASSWORD] });
}

main().catch(crashed(logs));
