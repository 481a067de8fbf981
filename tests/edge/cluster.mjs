// The edge on a real Redis Cluster (issue 14; shared/routed_conversation.h):
//
//   a real upstream → quiver-agent serve (redis+cluster://) → six redis-servers in cluster mode
//   (three masters, three replicas) → quiver-edge in workerd ×2 (REDIS_CLUSTER=1, seeded at a
//   master that does NOT serve the namespace's slot) → HTTP client
//
//   node tests/edge/cluster.mjs [--edge-dir build/wasm/edge] [--agent .../quiver-agent]
//                               [--only substring]
//
// Registered as the ctest `wasm.edge_cluster` (wasm-worker/CMakeLists.txt). Exit status 0 when every
// test passed, 77 (ctest SKIP_RETURN_CODE) when the native agent, redis-server or redis-cli is
// absent. The tests: discovery at both edges equals the agent's (same manifest, same ETag), the
// edges having learned the slot's node from the map their seed gave; a tools/call relayed through
// the cluster (enqueue + BLPOP on the slot's master) answered by the agent; replica reads (a third edge
// with QUIVER_REDIS_REPLICA_READS=1: its conditional reads run on the slot's replica, counted there,
// its full reads on the master);
// a CLUSTER FAILOVER of the slot's master mid-traffic is followed through MOVED with every read
// answered; the slot migrated to another master mid-traffic (IMPORTING/MIGRATING, MIGRATE, ASK,
// then SETSLOT NODE and MOVED) with every read answered, a replica edge's too; the same key by key,
// the replica edge never serving the half-moved slot its replica holds; a SIGKILLed master: while its replica is promoted the edges answer from their L1 copy
// (stale-if-error) or 503 STORE_UNAVAILABLE, never an empty or wrong list, and recover.
import assert from 'node:assert/strict';

import { agentBinaryOrSkip, startClusterAgent } from './agent.mjs';
import {
  RedisCluster, argValue, crashed, edgeDirArg, edgeEnv, finish, readFromRedis, runTests,
  skipUnlessInstalled, sleep, startEdges, waitForFresh,
} from './harness.mjs';

const edgeDir = edgeDirArg();
const only = argValue('--only', '');

const NS = 'cluster';
const KID = 'cluster-1';
const SECRET = 'cluster-e2e-caller-token-secret-0123456789';
const REDIS_PASSWORD = 'cluster-redis-password';  // the agent's (default) user, on every node
const EDGE_REDIS_PASSWORD = 'cluster-edge-redis-password';  // schema/redis-acl-edge.txt's user
const L1_TTL_MS = 50;  // short: the reads below reach Redis

let cluster;      // RedisCluster
let agent;        // Agent
const edges = []; // Workerd × 2
const logs = [];
let token;
let slot;         // the namespace's
let seed;         // the edges' seed: a master that does not serve `slot`
const auth = () => ({ authorization: `Bearer ${token}` });

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

const entry = (res) => res.json?.connections?.find((c) => c.id === 't');

async function healthz(w) {
  return (await w.request('GET', '/healthz')).json;
}

// Reads GET /v1/manifests at every edge of `ws` until `stop()` says so, recording each answer.
async function readLoop(stop, ws = edges) {
  const answers = [];
  while (!stop()) {
    await Promise.all(ws.map(async (w, i) => {
      const res = await w.request('GET', '/v1/manifests', { headers: auth() });
      answers.push({ edge: i, at: Date.now(), status: res.status, source: res.headers['x-quiver-cache'],
                     code: res.json?.error?.code, entry: entry(res), count: res.json?.connections?.length });
    }));
  }
  return answers;
}

test('discovery at both edges, seeded off the slot, equals the agent\'s', async () => {
  const fromAgent = entry(await agent.request('GET', '/v1/manifests', { headers: auth() }));
  assert.ok(fromAgent?.manifest, 'the agent serves t');
  for (const w of edges) {
    const res = await w.request('GET', '/v1/manifests', { headers: auth() });
    assert.equal(res.status, 200, res.text);
    const e = entry(res);
    assert.equal(e.etag, fromAgent.etag);
    assert.equal(JSON.stringify(e.manifest), JSON.stringify(fromAgent.manifest));
    const one = await w.request('GET', '/v1/mcp-connections/t/manifest', { headers: auth() });
    assert.equal(one.status, 200, one.text);
    assert.equal(JSON.stringify(one.json.manifest), JSON.stringify(fromAgent.manifest));
    const h = await healthz(w);
    assert.equal(h.cluster.slot, slot);
    assert.equal(h.cluster.map_known, true);
    assert.ok(h.cluster.refreshes >= 1, JSON.stringify(h.cluster));
  }
});

test('a tools/call through the edge is relayed to the agent on the slot\'s master', async () => {
  for (const [i, w] of edges.entries()) {
    const res = await w.request('POST', '/mcp', {
      headers: { ...auth(), 'content-type': 'application/json',
                 accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' },
      body: JSON.stringify({ jsonrpc: '2.0', id: i + 1, method: 'tools/call',
                             params: { name: 't__tool_1', arguments: {} } }) });
    assert.equal(res.status, 200, res.text);
    const text = res.headers['content-type']?.startsWith('text/event-stream')
      ? JSON.parse(res.text.split('\n').find((l) => l.startsWith('data: ')).slice(6)) : res.json;
    assert.equal(text.id, i + 1, res.text);
    assert.deepEqual(text.result?.content?.[0]?.text, 'called tool_1', res.text);
  }
});


test('replica reads: conditional reads go to the slot\'s replica after READONLY, full reads to its master', async () => {
  const { master, replicas } = await cluster.shardOf(slot);
  const [edge] = await startEdges(1, { edgeDir, logs, env: edgeEnv({
    ns: NS, kid: KID, secret: SECRET, redisPort: seed, edgeRedisPassword: EDGE_REDIS_PASSWORD,
    l1TtlMs: 0, extra: { REDIS_CLUSTER: '1', QUIVER_REDIS_REPLICA_READS: '1' } }) });
  try {
    const fromAgent = entry(await agent.request('GET', '/v1/manifests', { headers: auth() }));
    // The first read has no copy to check: a full read, its answer rendered from what it reads,
    // at the master (a replica answers a key its master's migration moved away as absent).
    let masterBefore = await cluster.commandCalls(master);
    const full = await edge.request('GET', '/v1/manifests', { headers: auth() });
    assert.equal(full.status, 200, full.text);
    assert.equal(full.headers['x-quiver-cache'], 'miss');
    assert.equal(entry(full).etag, fromAgent.etag);
    const scripts = (c) => (c.evalsha_ro ?? 0) + (c.eval_ro ?? 0);
    assert.ok(scripts(await cluster.commandCalls(master)) > scripts(masterBefore),
              'the full read ran at the master');
    // Then each read checks that copy against the versions: at the replica.
    const before = await cluster.commandCalls(replicas[0]);
    masterBefore = await cluster.commandCalls(master);
    const READS = 5;
    for (let i = 0; i < READS; i++) {
      const res = await edge.request('GET', '/v1/manifests', { headers: auth() });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.headers['x-quiver-cache'], 'revalidated');
      assert.equal(entry(res).etag, fromAgent.etag);
      assert.equal(JSON.stringify(entry(res).manifest), JSON.stringify(fromAgent.manifest));
    }
    const after = await cluster.commandCalls(replicas[0]);
    const masterAfter = await cluster.commandCalls(master);
    assert.equal((after.readonly ?? 0) - (before.readonly ?? 0), READS,
                 'one READONLY per request, on the replica');
    assert.ok(scripts(after) - scripts(before) >= READS, 'the discovery scripts ran on the replica');
    assert.equal(scripts(masterAfter) - scripts(masterBefore), 0, 'none on the master');
  } finally {
    await edge.stop();
  }
});

test('a CLUSTER FAILOVER mid-traffic is followed through MOVED, every read answered', async () => {
  const { master, replicas } = await cluster.shardOf(slot);
  assert.ok(replicas.length, 'the slot has a replica');
  const before = await Promise.all(edges.map(healthz));
  let done = false;
  const reads = readLoop(() => done);
  await sleep(300);
  await cluster.failover(replicas[0]);
  await cluster.waitUntilOk({ replicas: false });
  await sleep(500);
  done = true;
  const answers = await reads;
  assert.equal((await cluster.shardOf(slot)).master, replicas[0], 'the replica took over');
  assert.ok(answers.length > 10, `${answers.length} reads`);
  const bad = answers.filter((a) => a.status !== 200 || a.count !== 1 || !a.entry?.manifest);
  assert.deepEqual(bad, [], 'every read answered with the manifest');
  // At least the reads after the failover reached the new master through MOVED (the L1 TTL is
  // short, so most reads go to Redis).
  for (const [i, w] of edges.entries()) {
    const h = await healthz(w);
    assert.ok(h.cluster.moved > before[i].cluster.moved,
              `edge ${i} followed MOVED: ${JSON.stringify(h.cluster)} (old master ${master})`);
  }
  const last = answers.filter((a) => readFromRedis(a.source)).at(-1);
  assert.ok(last, 'reads reached Redis');
});

test('a slot migrated mid-traffic: the scripts wait out ASK (L1 copies meanwhile), then follow MOVED', async () => {
  const from = (await cluster.shardOf(slot, seed)).master;
  // A third edge reads with replica reads on: the migration empties the slot at `from`'s replica,
  // which answers absent where `from` answers ASK. Its conditional reads take that for a change
  // and read in full at the master: never the empty list the replica holds.
  await withReplicaEdge((replicaEdge) => migrateMidTraffic(from, replicaEdge, false));
});

// As a reshard with a small `--cluster-pipeline` does: the slot's keys moved a few at a time, its
// epoch and versions first, a pause after each. Meanwhile `from`'s replica holds a namespace no
// write ever made (some keys gone, the rest not): a conditional read there that finds a change
// must not render it; it reads in full at the master, which answers ASK (waited out: L1 copies).
test('a slot migrated key by key: the replica edge never serves the half-moved slot its replica holds', async () => {
  const from = (await cluster.shardOf(slot, seed)).master;
  await withReplicaEdge((replicaEdge) => migrateMidTraffic(from, replicaEdge, true));
});

async function withReplicaEdge(fn) {
  const [replicaEdge] = await startEdges(1, { edgeDir, logs, env: edgeEnv({
    ns: NS, kid: KID, secret: SECRET, redisPort: seed, edgeRedisPassword: EDGE_REDIS_PASSWORD,
    l1TtlMs: L1_TTL_MS, extra: { REDIS_CLUSTER: '1', QUIVER_REDIS_REPLICA_READS: '1' } }) });
  try {
    await waitForFresh(replicaEdge, token, 1);
    await fn(replicaEdge);
  } finally {
    await replicaEdge.stop();
  }
}

async function migrateMidTraffic(from, replicaEdge, keyByKey) {
  const masters = [];
  for (const port of cluster.alive()) {
    if ((await cluster.call(port, 'ROLE'))[0] === 'master') masters.push(port);
  }
  const to = masters.find((p) => p !== from && p !== seed);
  const fromId = await cluster.call(from, 'CLUSTER', 'MYID');
  const toId = await cluster.call(to, 'CLUSTER', 'MYID');
  const before = await Promise.all(edges.map(healthz));
  const replicaBefore = await healthz(replicaEdge);
  let done = false;
  const reads = readLoop(() => done, [...edges, replicaEdge]);
  await sleep(300);
  // As `redis-cli --cluster reshard` does, with every key of the slot in one MIGRATE: the
  // namespace's scripts read keys they do not declare (key layout v1), so the slot should not be
  // split between the two nodes while they run (keyByKey: it is, to prove the replica edge).
  await cluster.call(to, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', fromId);
  await cluster.call(from, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', toId);
  const keys = await cluster.call(from, 'CLUSTER', 'GETKEYSINSLOT', slot, 1000000);
  assert.ok(keys.length > 0, 'the namespace has keys');
  const first = (k) => (/:(epoch|version)/.test(k) ? 0 : 1);
  const batches = keyByKey ? [...keys].sort((a, b) => first(a) - first(b)).map((k) => [k]) : [keys];
  for (const batch of batches) {
    assert.equal(await cluster.call(from, 'MIGRATE', '127.0.0.1', to, '', 0, 10000, 'AUTH',
                                    REDIS_PASSWORD, 'KEYS', ...batch), 'OK');
    if (keyByKey) await sleep(150);
  }
  // The keys are at `to`, the slot still `from`'s: `from` answers ASK, which a round holding a
  // script (every discovery read) waits out instead of following (hold_ask_for_round: key layout
  // v1's scripts read keys they do not declare), answered from L1 meanwhile.
  await sleep(1000);
  for (const port of [to, from, ...masters.filter((p) => p !== to && p !== from)]) {
    await cluster.call(port, 'CLUSTER', 'SETSLOT', slot, 'NODE', toId);
  }
  await cluster.waitUntilOk({ replicas: false });
  await sleep(500);
  done = true;
  const answers = await reads;
  assert.equal((await cluster.shardOf(slot, seed)).master, to, 'the slot moved');
  const bad = answers.filter((a) => a.status !== 200 || a.count !== 1 || !a.entry?.manifest);
  assert.deepEqual(bad, [], 'every read answered with the manifest');
  for (const [i, w] of edges.entries()) {
    const h = await healthz(w);
    assert.ok(h.cluster.ask > before[i].cluster.ask, `edge ${i} was answered ASK: ${JSON.stringify(h.cluster)}`);
    assert.ok(h.cluster.moved > before[i].cluster.moved, `edge ${i} followed MOVED: ${JSON.stringify(h.cluster)}`);
  }
  const stale = answers.filter((a) => a.source === 'stale-if-error').length;
  const atReplicaEdge = answers.filter((a) => a.edge === edges.length);
  const replicaAfter = await healthz(replicaEdge);
  assert.ok(atReplicaEdge.some((a) => a.source === 'revalidated'), 'the replica edge revalidated');
  assert.ok(replicaAfter.cluster.moved > replicaBefore.cluster.moved,
            `the replica edge followed MOVED: ${JSON.stringify(replicaAfter.cluster)}`);
  console.log(`      ${answers.length} reads during the migration: ${stale} from L1 ` +
              `(stale-if-error); at the replica edge ${atReplicaEdge.length}, sources ` +
              `${[...new Set(atReplicaEdge.map((a) => a.source))].join(',')}`);
  const res = await agent.request('GET', '/v1/manifests', { headers: auth() });
  assert.equal(res.status, 200, res.text);
}

test('a SIGKILLed master: L1 copies or 503 meanwhile, never a wrong list, then recovery', async () => {
  const { master, replicas } = await cluster.shardOf(slot, seed);
  assert.notEqual(master, seed, 'the seed survives');
  assert.ok(replicas.length, 'the slot has a replica');
  const before = await Promise.all(edges.map(healthz));
  let done = false;
  const reads = readLoop(() => done);
  await sleep(300);
  await cluster.kill(master);
  await cluster.waitUntilOk({ replicas: false, timeoutMs: 60000 });
  // Until both edges answer from Redis again.
  const recoveredAt = Date.now();
  for (;;) {
    const rs = await Promise.all(edges.map((w) => w.request('GET', '/v1/manifests', { headers: auth() })));
    if (rs.every((r) => r.status === 200 && readFromRedis(r.headers['x-quiver-cache']))) break;
    assert.ok(Date.now() - recoveredAt < 30000, 'the edges recover within 30 s of the promotion');
    await sleep(100);
  }
  done = true;
  const answers = await reads;
  assert.equal((await cluster.shardOf(slot, seed)).master, replicas[0], 'the replica took over');
  for (const a of answers) {
    if (a.status === 200) {
      assert.equal(a.count, 1, JSON.stringify(a));
      assert.ok(a.entry?.manifest, JSON.stringify(a));
    } else {
      assert.equal(a.status, 503, JSON.stringify(a));
      assert.equal(a.code, 'STORE_UNAVAILABLE', JSON.stringify(a));
    }
  }
  for (const [i, w] of edges.entries()) {
    const h = await healthz(w);
    assert.ok(h.cluster.refreshes > before[i].cluster.refreshes,
              `edge ${i} asked for the map again: ${JSON.stringify(h.cluster)}`);
  }
  const stale = answers.filter((a) => a.source === 'stale-if-error').length;
  console.log(`      ${answers.length} reads during the kill: ${stale} from L1 (stale-if-error), ` +
              `${answers.filter((a) => a.status === 503).length} 503`);
  // The agent serves on, through its own pool.
  const res = await agent.request('GET', '/v1/manifests', { headers: auth() });
  assert.equal(res.status, 200, res.text);
});

// ---- runner ------------------------------------------------------------------------------------

async function main() {
  const agentBinary = agentBinaryOrSkip();
  skipUnlessInstalled('redis-server', ['--version']);
  skipUnlessInstalled('redis-cli', ['--version']);
  const started = Date.now();
  let failed = 0;
  try {
    cluster = await RedisCluster.start({ password: REDIS_PASSWORD });
    ({ slot, seed } = await cluster.prepareForEdges(NS, EDGE_REDIS_PASSWORD));
    agent = await startClusterAgent({ binary: agentBinary, logs, cluster, ns: NS, kid: KID,
                                      secret: SECRET, password: REDIS_PASSWORD });
    token = agent.token('alice');
    await waitForFresh(agent, token, 1);
    const env = edgeEnv({
      ns: NS, kid: KID, secret: SECRET, redisPort: seed, edgeRedisPassword: EDGE_REDIS_PASSWORD,
      l1TtlMs: L1_TTL_MS, extra: { REDIS_CLUSTER: '1' } });
    edges.push(...await startEdges(2, { edgeDir, env, logs }));
    await waitForFresh(edges[0], token, 1);
    await waitForFresh(edges[1], token, 1);
    failed += await runTests(tests, only);
  } finally {
    for (const w of edges) await w.stop();
    await agent?.stop();
    await cluster?.stop();
  }
  finish({ failed, count: tests.length, started, logs,
           secrets: [SECRET, REDIS_PASSWORD, EDGE_REDIS_PASSWORD] });
}

main().catch(crashed(logs));
