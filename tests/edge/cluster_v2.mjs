// Edges reading key layout v2 on a real Redis Cluster through faults (issue 14; docs/design.md
// "Redis Cluster routing", "The discovery read on v2, round by round"):
//
//   six stdio upstreams (shared) and one HTTP upstream (per member) → quiver-agent serve
//   (redis+cluster://), moved to key layout v2 by `quiver-agent migrate-layout v2` while it runs →
//   six redis-servers in cluster mode (three masters, three replicas; two shared connections'
//   slots on each master) → quiver-edge in workerd ×2 (REDIS_CLUSTER=1, the edge's ACL user,
//   seeded at a master serving neither the namespace's slot nor alice's) → HTTP client
//
//   node tests/edge/cluster_v2.mjs [--edge-dir build/wasm/edge] [--agent .../quiver-agent]
//                                  [--only substring]
//
// Registered as the ctest `wasm.edge_cluster_v2` (wasm-worker/CMakeLists.txt). Exit status 0 when
// every test passed, 77 (ctest SKIP_RETURN_CODE) when the native agent, redis-server or redis-cli
// is absent. During each fault both edges and the agent are read in a loop while the member's
// version moves and the agent refreshes connections (readLoop); every answer must be the whole
// list as the agent wrote it (from Redis, or an L1 copy within stale-if-error) or 503
// STORE_UNAVAILABLE, never a list missing a connection nor a connection without its manifest.
// The tests, in order, on one cluster:
//   a. both edges' GET /v1/manifests is the agent's (every connection, same manifests and ETags),
//      the two edges' answers byte for byte the same, /healthz says the edges read v2;
//   b. a CLUSTER FAILOVER of the master of alice's slot (serving connections too), mid-traffic, a
//      tool added at one of its connections and refreshed through the agent meanwhile: every
//      answer allowed (that connection as before or as changed); the edges count MOVED and serve
//      the change, read from Redis;
//   c. one shared connection's slot resharded mid-traffic (IMPORTING/MIGRATING, MIGRATE a key at a
//      time with pauses, its version first, SETSLOT NODE): split and quiet, the edges' conditional
//      reads follow ASK (ASKING + GET at the importing node) and answer from Redis; split with
//      writes, the full reads (whose connection script Redis refuses on a split slot: TRYAGAIN)
//      read that connection key by key and answer the whole list from Redis, at both edges and
//      the agent (no L1 copy, no 503); every answer allowed, ASK, MOVED and the split reads
//      counted;
//   d. a SIGKILL of the master of alice's slot: while its replica is promoted every answer is
//      allowed (L1 copies or 503); the edges refresh their map and recover;
//   e. after the faults, a tool added at every upstream and refreshed through the agent shows at
//      both edges with the agent's ETags;
//   f. the dead master forgotten, a fourth master added (`redis-cli --cluster add-node`) and the
//      cluster rebalanced onto it mid-traffic (`redis-cli --cluster rebalance
//      --cluster-use-empty-masters`: a quarter of the slots, each slot's keys in MIGRATEs of 10),
//      then every slot the reads touch that it left moved there at once, two keys at a time:
//      every answer whole, the edges follow MOVED, and a tool added at every upstream after it,
//      refreshed through the agent into the moved slots, shows at every edge;
//   g. a shard that lost its data: the namespace's slot and alice's moved off the master serving
//      the most connections, then FLUSHALL there mid-traffic; then the same at the master of
//      alice's slot. Every answer is every connection (a listing the loss took `pending` or
//      `error`, never missing) or 503 (the reader refuses a granted connection whose record and
//      version are both gone, and a member without a version); the agent finds versions it had
//      seen gone, marks the namespace restoring and restores it; the lost connections are listed
//      again, and a tool added after it shows at every edge.
// A third edge reads with replica reads on (QUIVER_REDIS_REPLICA_READS=1; answers `edge:
// 'replica'`), held to the same rule through every fault: in c its conditional reads run at the
// replicas, which know nothing of the reshard (a key moved away is absent there, not ASK).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { HttpUpstream, agentBinaryOrSkip, startClusterAgent } from './agent.mjs';
import {
  RedisCluster, argValue, crashed, edgeDirArg, edgeEnv, finish, flatMap, readFromRedis, runTests,
  skipUnlessInstalled, sleep, startEdges, waitFor, waitForFresh,
} from './harness.mjs';

const edgeDir = edgeDirArg();
const only = argValue('--only', '');

const NS = 'spreadfaults';
const KID = 'cluster-v2-1';
const SECRET = 'cluster-v2-e2e-caller-token-secret-0123456789';
const REDIS_PASSWORD = 'cluster-v2-redis-password';  // the agent's (default) user, on every node
const EDGE_REDIS_PASSWORD = 'cluster-v2-edge-redis-password';  // schema/redis-acl-edge.txt's user
// alice's credential for the per-member upstream (--per-auth: `alice.<key>` names alice).
const PERM_CREDENTIAL = 'alice.cluster-v2-per-member-key';
const L1_TTL_MS = 50;  // short: the reads below reach Redis
const PER_MASTER = 2;  // connections whose slot each master serves at the start

let cluster;      // RedisCluster
let agent;        // Agent
const edges = []; // Workerd × 2
const replicaEdges = [];  // Workerd × 1, QUIVER_REDIS_REPLICA_READS=1 (its answers: edge 'replica')
const logs = [];
let token;
let seed;         // the edges' seed: a master, kept alive and master throughout
let dir;          // the upstreams' control files
let perm;         // HttpUpstream of the per-member connection
const upstreams = [];  // {id, control} (shared), and {id: 'perm', server, connection} (per member)
let baseline;     // id → {etag, manifest: JSON text}, as the agent serves them after the switch
const auth = () => ({ authorization: `Bearer ${token}` });

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

const connSlotKey = (cid) => `quiver:{${NS}:c:${cid}}:conn`;

async function healthz(w) {
  return (await w.request('GET', '/healthz')).json;
}

// The masters now (as `port` sees them), and for each slot the master serving it.
async function masters() {
  const out = [];
  for (const port of cluster.alive()) {
    if ((await cluster.call(port, 'ROLE'))[0] === 'master') out.push(port);
  }
  return out;
}
// READONLY calls at the replicas now: one per connection an edge with replica reads opens.
async function readonlyAtReplicas() {
  const ms = await masters();
  let n = 0;
  for (const port of cluster.alive().filter((p) => !ms.includes(p))) {
    n += (await cluster.commandCalls(port)).readonly ?? 0;
  }
  return n;
}
async function memberSlot() {
  return cluster.call(cluster.alive()[0], 'CLUSTER', 'KEYSLOT', `quiver:{${NS}:m:alice}:grants`);
}
async function masterOfConnection(cid) {
  const slot = await cluster.call(seed, 'CLUSTER', 'KEYSLOT', connSlotKey(cid));
  return { slot, master: (await cluster.shardOf(slot, seed)).master };
}

// id → {etag, manifest} of a GET /v1/manifests answer's entries.
function entries(json) {
  const out = {};
  for (const c of json?.connections ?? []) {
    out[c.id] = { etag: c.etag, manifest: c.manifest ? JSON.stringify(c.manifest) : undefined };
  }
  return out;
}

// What an answer during a fault may be: the whole list as the agent wrote it (read from Redis, or
// an L1 copy within stale-if-error), or 503 STORE_UNAVAILABLE. Anything else is returned as a
// string saying why. `alt` (id → entry) is a connection's other allowed entry: one written during
// the fault.
function wrongAnswer(a, alt = {}) {
  if (a.status === 503) return a.code === 'STORE_UNAVAILABLE' ? null : `503 ${a.code}`;
  if (a.status !== 200) return `status ${a.status} ${a.code}`;
  // The agent has no L1: its answers say nothing of where they came from.
  if (a.edge !== 'agent' && !readFromRedis(a.source) && a.source !== 'stale-if-error' &&
      a.source !== 'hit') {
    return `X-Quiver-Cache ${a.source}`;
  }
  const ids = Object.keys(a.entries).sort();
  const want = Object.keys(baseline).sort();
  if (JSON.stringify(ids) !== JSON.stringify(want)) return `connections ${ids} (want ${want})`;
  for (const id of want) {
    if (!a.entries[id].manifest) return `${id} without its manifest`;
    const ok = [baseline[id], alt[id]].some((e) => e && a.entries[id].etag === e.etag &&
                                                    a.entries[id].manifest === e.manifest);
    if (!ok) return `${id}: another manifest (etag ${a.entries[id].etag})`;
  }
  return null;
}

// The member's version moved, as any change of alice's grants, preferences or per-member data
// moves it (an INCR on its slot's master, wherever that is now); errors are traffic lost, not
// checked: this is a writer, the reads are what is checked.
async function bumpMemberVersion() {
  const key = `quiver:{${NS}:m:alice}:version`;
  try {
    const slot = await cluster.call(seed, 'CLUSTER', 'KEYSLOT', key);
    // Only where it exists, as every write but the grant write does (a missing version says the
    // slot lost its data: g).
    await cluster.call((await cluster.shardOf(slot, seed)).master, 'EVAL',
                       "if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('INCR', KEYS[1]) end return 0",
                       1, key);
    return true;
  } catch {
    return false;
  }
}

// Reads GET /v1/manifests at both edges until `stop()` says so, recording each answer; each edge
// reads again once its L1 copy expired, so every read reaches Redis unless Redis fails it. The
// agent is read too, every 100 ms (`edge: 'agent'`): its answers are held to the same rule.
// Meanwhile, while `writing()` says so, writers: the member's version moves every 100 ms, so the
// edges' conditional reads (one GET per slot) find a change and read the rounds in full (the
// one-slot scripts on every connection's slot); and the agent refreshes the connections one after
// another (POST refresh-tools: leases and commits into the same slots).
async function readLoop(stop, writing = () => true, answers = []) {
  const refreshes = [];
  let bumped = 0;
  const churn = (async () => {
    for (let i = 0; !stop(); i++) {
      if (writing()) {
        if (await bumpMemberVersion()) ++bumped;
        if (i % 3 === 0) {
          const { id } = upstreams[(i / 3) % upstreams.length];
          const r = await agent.request('POST', `/v1/mcp-connections/${id}/refresh-tools`, { headers: auth() });
          refreshes.push(r.status);
        }
      }
      await sleep(100);
    }
  })();
  await Promise.all([...edges.entries(), ...replicaEdges.map((w) => ['replica', w]),
                     ['agent', agent]].map(async ([i, w]) => {
    while (!stop()) {
      const t0 = Date.now();
      const res = await w.request('GET', '/v1/manifests', { headers: auth() });
      answers.push({ edge: i, start: t0, at: Date.now(), status: res.status,
                     source: res.headers['x-quiver-cache'], code: res.json?.error?.code,
                     entries: entries(res.json),
                     statuses: Object.fromEntries((res.json?.connections ?? []).map((c) => [c.id, c.status])) });
      await sleep(i === 'agent' ? 100 : L1_TTL_MS + 5);
    }
  }));
  await churn;
  assert.ok(refreshes.includes(202), `the agent queued refreshes: ${refreshes}`);
  assert.ok(bumped > 0, 'the member\'s version moved');
  return answers;
}

// Every answer of `all` allowed; a line saying how the edges' and the agent's were answered.
function checkAnswers(all, alt = {}) {
  const bad = all.map((a) => ({ a, why: wrongAnswer(a, alt) })).filter((x) => x.why);
  assert.deepEqual(bad.slice(0, 5).map(({ a, why }) => `edge ${a.edge} at ${a.at}: ${why}`), [],
                   `${bad.length} of ${all.length} answers wrong`);
  const answers = all.filter((a) => a.edge !== 'agent');
  const atAgent = all.filter((a) => a.edge === 'agent');
  const count = (f) => answers.filter(f).length;
  assert.ok(count((a) => a.source === 'miss') > 0, 'some reads were full reads');
  return `${answers.length} reads: ${count((a) => a.source === 'miss')} full and ` +
         `${count((a) => a.source === 'revalidated')} conditional from Redis, ` +
         `${count((a) => a.source === 'stale-if-error')} from L1 (stale-if-error), ` +
         `${count((a) => a.status === 503)} 503; slowest ` +
         `${Math.max(...answers.map((a) => a.at - a.start))} ms; at the agent ${atAgent.length} ` +
         `reads, ${atAgent.filter((a) => a.status === 503).length} 503, slowest ` +
         `${Math.max(...atAgent.map((a) => a.at - a.start))} ms`;
}

// Until both edges answer the whole list from Redis again.
async function untilRecovered(timeoutMs) {
  await waitFor('both edges reading Redis again', async () => {
    const rs = await Promise.all(edges.map((w) => w.request('GET', '/v1/manifests', { headers: auth() })));
    return rs.every((r) => r.status === 200 && readFromRedis(r.headers['x-quiver-cache']) &&
                           !wrongAnswer({ status: 200, source: r.headers['x-quiver-cache'],
                                          entries: entries(r.json) }));
  }, timeoutMs);
}

test('a: discovery at both edges equals the agent\'s, read in layout v2', async () => {
  const fromAgent = await agent.request('GET', '/v1/manifests', { headers: auth() });
  assert.equal(fromAgent.status, 200, fromAgent.text);
  assert.deepEqual(entries(fromAgent.json), baseline);
  const bodies = [];
  for (const w of edges) {
    const res = await w.request('GET', '/v1/manifests', { headers: auth() });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(entries(res.json), baseline);
    assert.equal(res.headers.etag, fromAgent.headers.etag, 'the list\'s ETag');
    bodies.push(res.text.replace(/"age_ms":\d+/g, '"age_ms":0'));
    for (const { id } of upstreams) {
      const one = await w.request('GET', `/v1/mcp-connections/${id}/manifest`, { headers: auth() });
      assert.equal(one.status, 200, one.text);
      assert.equal(JSON.stringify(one.json.manifest), baseline[id].manifest, id);
    }
    const h = await healthz(w);
    assert.equal(h.layout.reads, 'v2', JSON.stringify(h.layout));
    assert.equal(h.cluster.map_known, true, JSON.stringify(h.cluster));
  }
  assert.equal(bodies[0], bodies[1], 'the two edges answer the same bytes');
  // The per-member connection's manifest is alice's, read from her slot.
  assert.match(baseline.perm.manifest, /"alice_tool_1"/);
  // The reads were spread: every master ran some of the rounds' one-slot scripts.
  for (const port of await masters()) {
    const calls = await cluster.commandCalls(port);
    assert.ok((calls.evalsha_ro ?? 0) + (calls.eval_ro ?? 0) > 0, `${port}: ${JSON.stringify(calls)}`);
  }
});

test('b: a CLUSTER FAILOVER mid-traffic, a change committed during it: whole lists or 503, then MOVED', async () => {
  // The master of alice's slot, serving connections too (not the seed: it stays a master).
  const owners = await Promise.all(upstreams.map(({ id }) => masterOfConnection(id)));
  const { master: old, replicas } = await cluster.shardOf(await memberSlot(), seed);
  assert.notEqual(old, seed);
  const changed = upstreams.find((u, k) => u.control && owners[k].master === old);
  assert.ok(changed, 'it serves a shared connection');
  assert.ok(replicas.length, 'the master has a replica');
  const before = await Promise.all(edges.map(healthz));
  let done = false;
  const reads = readLoop(() => done);
  await sleep(500);
  await cluster.failover(replicas[0]);
  // A tool added at a connection of the shard just failed over, refreshed through the agent while
  // the edges may still send to the old master: its commit, its version and its new body.
  appendFileSync(changed.control, '{"add_tool":"mid_failover"}\n');
  await waitFor(`the agent queues ${changed.id}'s refresh`, async () => (await agent.request(
    'POST', `/v1/mcp-connections/${changed.id}/refresh-tools`, { headers: auth() })).status === 202,
  10000);
  await cluster.waitUntilOk({ replicas: false });
  await sleep(1500);
  done = true;
  const answers = await reads;
  for (const o of owners.filter((x) => x.master === old)) {
    assert.equal((await cluster.shardOf(o.slot, seed)).master, replicas[0], 'the replica took over');
  }
  let updated;
  let asked = Date.now();
  await waitFor('the agent serves the new tool', async () => {
    const r = await agent.request('GET', '/v1/manifests', { headers: auth() });
    const e = r.status === 200 && entries(r.json);
    if (e && e[changed.id]?.manifest?.includes('"mid_failover"')) updated = e;
    // The upstream applies its control file on a 25 ms poll: a listing that ran before it did
    // committed the old list. Asked again (a manual refresh is queued again once its gate is a
    // second old) until the change is there.
    if (!updated && Date.now() - asked > 2000) {
      asked = Date.now();
      await agent.request('POST', `/v1/mcp-connections/${changed.id}/refresh-tools`,
                          { headers: auth() });
    }
    return updated;
  }, 20000);
  assert.ok(answers.filter((a) => a.edge !== 'agent').length > 10, `${answers.length} reads`);
  console.log(`      ${checkAnswers(answers, { [changed.id]: updated[changed.id] })}; ` +
              `${answers.filter((a) => a.edge !== 'agent' && a.entries[changed.id]?.etag ===
                                       updated[changed.id].etag).length} edge answers with ` +
              `${changed.id}'s change`);
  for (const [i, w] of edges.entries()) {
    const h = await healthz(w);
    assert.ok(h.cluster.moved > before[i].cluster.moved,
              `edge ${i} followed MOVED: ${JSON.stringify(h.cluster)} (old master ${old})`);
  }
  assert.ok(answers.filter((a) => readFromRedis(a.source)).at(-1), 'reads reached Redis');
  // Both edges serve the change, read from Redis: the list as the agent serves it now.
  baseline = updated;
  await untilRecovered(10000);
});

test('c: one connection\'s slot resharded mid-traffic: ASK followed with ASKING, every answer whole', async () => {
  const now = await masters();
  assert.ok(now.includes(seed), 'the seed is a master');
  // A shared connection (its manifest in its slot) on a master other than the seed, moved to the
  // third master.
  let moving;
  for (const { id } of upstreams.filter((u) => u.control)) {
    const o = await masterOfConnection(id);
    if (o.master !== seed) {
      moving = { id, ...o };
      break;
    }
  }
  assert.ok(moving, 'a connection off the seed');
  const { slot, master: from } = moving;
  const to = now.find((p) => p !== from && p !== seed);
  const fromId = await cluster.call(from, 'CLUSTER', 'MYID');
  const toId = await cluster.call(to, 'CLUSTER', 'MYID');
  const before = await Promise.all(edges.map(healthz));
  const askingBefore = (await cluster.commandCalls(to)).asking ?? 0;
  const readonlyBefore = await readonlyAtReplicas();
  let done = false;
  let writing = false;
  const seen = [];
  const reads = readLoop(() => done, () => writing, seen);
  // Phase 1, the slot split and nothing written: the edges' copies are current, so their reads
  // are conditional, one GET per slot held; the connection's version moves first, so those GETs
  // are answered ASK by `from` and follow it to `to` (ASKING + GET). First, until the refreshes
  // queued by the test before committed: for two seconds every read at both edges revalidated.
  await waitFor('nothing written for two seconds', () => edges.every((_, i) => {
    const last = seen.filter((a) => a.edge === i && a.start > Date.now() - 2000);
    return last.length >= 8 && last.every((a) => a.source === 'revalidated');
  }), 30000);
  const split = Date.now();
  await cluster.call(to, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', fromId);
  await cluster.call(from, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', toId);
  const versionKey = `quiver:{${NS}:c:${moving.id}}:version`;
  const keys = await cluster.call(from, 'CLUSTER', 'GETKEYSINSLOT', slot, 1000);
  assert.ok(keys.length > 1 && keys.includes(versionKey), `the connection's slot holds its keys: ${keys}`);
  // One key at a time, a pause after each: the slot is split between the nodes meanwhile.
  let versionMoved;
  for (const key of [versionKey, ...keys.filter((k) => k !== versionKey)]) {
    assert.equal(await cluster.call(from, 'MIGRATE', '127.0.0.1', to, '', 0, 10000, 'AUTH',
                                    REDIS_PASSWORD, 'KEYS', key), 'OK');
    versionMoved ??= Date.now();
    await sleep(250);
  }
  // Every key at `to`, the slot still `from`'s: `from` answers ASK for all of them.
  await sleep(500);
  const phase2 = Date.now();
  // Phase 2, still split, the writers on again: the full reads' scripts on the split slot are
  // answered TRYAGAIN (Redis runs a command of several keys on neither node while some of them
  // are absent, and a connection's read always declares absent ones: its lease, its disabled set);
  // the read takes that TRYAGAIN at once and reads the connection key by key (GET version, each
  // key by its own command following ASK, GET version: shared/discovery_spread.h), so every read
  // answers the whole list from Redis.
  writing = true;
  await sleep(1500);
  const settled = Date.now();
  for (const port of [to, from, ...now.filter((p) => p !== to && p !== from)]) {
    await cluster.call(port, 'CLUSTER', 'SETSLOT', slot, 'NODE', toId);
  }
  await cluster.waitUntilOk({ replicas: false });
  await sleep(1000);
  done = true;
  const answers = await reads;
  assert.equal((await cluster.shardOf(slot, seed)).master, to, 'the slot moved');
  console.log(`      ${checkAnswers(answers)}`);
  // Phase 1: the version at `to`, the slot still `from`'s: conditional reads answered from Redis
  // through ASK, at both edges.
  const edgeAnswers = answers.filter((a) => a.edge !== 'agent');
  const first = edgeAnswers.filter((a) => a.start > versionMoved && a.at < phase2);
  for (const i of edges.keys()) {
    assert.ok(first.some((a) => a.edge === i && a.source === 'revalidated'),
              `edge ${i}: a read revalidated through ASK while split: ` +
              `${first.filter((a) => a.edge === i).map((a) => a.source)}`);
  }
  const inSplit = edgeAnswers.filter((a) => a.start >= phase2 && a.at < settled);
  const slowest = Math.max(0, ...edgeAnswers.filter((a) => a.start >= phase2 && a.start < settled)
    .map((a) => a.at - a.start));
  console.log(`      phase 1 (split, no writes): ${first.length} reads, ` +
              `${first.filter((a) => a.source === 'revalidated').length} revalidated; ` +
              `phase 2 (split, writes): ${inSplit.length} reads, sources ` +
              `${[...new Set(inSplit.map((a) => a.source ?? a.status))].join(',')}, slowest ${slowest} ms`);
  // Phase 2: every answer read from Redis, the whole list (checkAnswers), at both edges and the
  // agent: the split connection read key by key, never an L1 copy nor a 503; full reads at both.
  for (const i of edges.keys()) {
    assert.ok(inSplit.some((a) => a.edge === i && a.source === 'miss'),
              `edge ${i}: a full read while split with writes: ` +
              `${inSplit.filter((a) => a.edge === i).map((a) => a.source)}`);
  }
  const notFromRedis = inSplit.filter((a) => a.status !== 200 || !readFromRedis(a.source));
  assert.deepEqual(notFromRedis.map((a) => `edge ${a.edge}: ${a.status} ${a.source ?? a.code}`), [],
                   'every edge read while split answered from Redis');
  const agentInSplit = answers.filter((a) => a.edge === 'agent' && a.start >= phase2 && a.at < settled);
  assert.ok(agentInSplit.length > 0, 'the agent was read while split');
  assert.deepEqual(agentInSplit.filter((a) => a.status !== 200).map((a) => `${a.status} ${a.code}`), [],
                   'the agent answered every read while split');
  for (const [i, w] of edges.entries()) {
    const h = await healthz(w);
    assert.ok(h.cluster.ask > before[i].cluster.ask, `edge ${i} was answered ASK: ${JSON.stringify(h.cluster)}`);
    assert.ok(h.cluster.moved > before[i].cluster.moved, `edge ${i} followed MOVED: ${JSON.stringify(h.cluster)}`);
    assert.ok(h.cluster.split > (before[i].cluster.split ?? 0),
              `edge ${i} read the split connection key by key: ${JSON.stringify(h.cluster)}`);
  }
  const asked = ((await cluster.commandCalls(to)).asking ?? 0) - askingBefore;
  assert.ok(asked > 0, 'ASKING reached the importing node');
  // The replica edge: its conditional reads ran at the replicas (whose view of the split slot is
  // `from`'s keys, the moved ones absent) and every answer of it was whole (checkAnswers): an
  // absent version read as a change, read in full at the masters.
  const atReplicaEdge = answers.filter((a) => a.edge === 'replica');
  const readonly = (await readonlyAtReplicas()) - readonlyBefore;
  assert.ok(atReplicaEdge.some((a) => a.source === 'revalidated'), 'the replica edge revalidated');
  assert.ok(readonly > 0, 'the replica edge read at the replicas');
  console.log(`      ${asked} ASKING at the importing node; the replica edge ${atReplicaEdge.length} ` +
              `reads, ${atReplicaEdge.filter((a) => a.source === 'revalidated').length} ` +
              `revalidated, ${readonly} READONLY at the replicas`);
  await untilRecovered(10000);
});

test('d: a SIGKILLed master: L1 copies or 503 meanwhile, never a partial list, then recovery', async () => {
  const now = await masters();
  // The master of alice's slot now (the replica promoted in b), serving connections, with a
  // replica (the old master) to promote.
  const slot = await memberSlot();
  const { master, replicas } = await cluster.shardOf(slot, seed);
  assert.notEqual(master, seed);
  assert.ok(replicas.length, `its replica (masters ${now})`);
  const victim = { master, slot, replica: replicas[0] };
  const served = [];
  for (const { id } of upstreams) if ((await masterOfConnection(id)).master === master) served.push(id);
  assert.ok(served.length, 'it serves connections');
  const before = await Promise.all(edges.map(healthz));
  let done = false;
  const reads = readLoop(() => done);
  await sleep(300);
  await cluster.kill(victim.master);
  await cluster.waitUntilOk({ replicas: false, timeoutMs: 60000 });
  await untilRecovered(30000);
  done = true;
  const answers = await reads;
  assert.equal((await cluster.shardOf(victim.slot, seed)).master, victim.replica, 'the replica took over');
  console.log(`      ${checkAnswers(answers)}`);
  for (const [i, w] of edges.entries()) {
    const h = await healthz(w);
    assert.ok(h.cluster.refreshes > before[i].cluster.refreshes,
              `edge ${i} asked for the map again: ${JSON.stringify(h.cluster)}`);
  }
  const res = await agent.request('GET', '/v1/manifests', { headers: auth() });
  assert.equal(res.status, 200, res.text);
});

test('e: after the faults, an upstream change refreshed through the agent shows at both edges', async () => {
  await changeEveryUpstream('after_faults', edges);
});

// A tool `tool` added at every upstream (every connection, so the ones on a promoted replica or a
// moved slot are among them, and the per-member one, whose manifest is in the member's slot),
// refreshed through the agent until it serves every one; then every edge of `ws` serves the
// agent's list. Returns the agent's answer.
async function changeEveryUpstream(tool, ws) {
  for (const { control } of upstreams.filter((u) => u.control)) {
    appendFileSync(control, `{"add_tool":"${tool}"}\n`);
  }
  const added = await fetch(perm.control, { method: 'POST', body: `{"add_tool":"${tool}"}` });
  assert.equal(added.status, 200, await added.text());
  const hasIt = (json, id) => json?.connections?.find((c) => c.id === id)?.manifest?.tools?.items
    ?.some((t) => t.name.endsWith(tool));
  for (const { id } of upstreams) {
    await waitFor(`the agent queues ${id}'s refresh`, async () => {
      const r = await agent.request('POST', `/v1/mcp-connections/${id}/refresh-tools`, { headers: auth() });
      return r.status === 202;
    }, 30000);
  }
  let fromAgent;
  let asked = Date.now();
  await waitFor('the agent serves every connection\'s new tool', async () => {
    const r = await agent.request('GET', '/v1/manifests', { headers: auth() });
    if (r.status === 200 && upstreams.every(({ id }) => hasIt(r.json, id))) fromAgent = r;
    // As in b: a listing that ran before an upstream applied its control committed the old list.
    if (!fromAgent && r.status === 200 && Date.now() - asked > 2000) {
      asked = Date.now();
      for (const { id } of upstreams.filter(({ id }) => !hasIt(r.json, id))) {
        await agent.request('POST', `/v1/mcp-connections/${id}/refresh-tools`, { headers: auth() });
      }
    }
    return fromAgent;
  }, 60000);
  const want = entries(fromAgent.json);
  for (const { id } of upstreams) assert.notEqual(want[id].etag, baseline[id].etag, id);
  for (const [i, w] of ws.entries()) {
    await waitFor(`edge ${i} serves the new tools`, async () => {
      const r = await w.request('GET', '/v1/manifests', { headers: auth() });
      return r.status === 200 && JSON.stringify(entries(r.json)) === JSON.stringify(want);
    }, 10000);
  }
  return fromAgent;
}

// Moves `slot` to the master `to` as a reshard does, under traffic: IMPORTING/MIGRATING, its keys in
// MIGRATEs of `batch` with a pause after each, then SETSLOT NODE at every master. Nothing when
// `to` serves it already.
async function migrateSlot(slot, to, { batch = 10, pauseMs = 100 } = {}) {
  const from = (await cluster.shardOf(slot, seed)).master;
  if (from === to) return false;
  const fromId = await cluster.call(from, 'CLUSTER', 'MYID');
  const toId = await cluster.call(to, 'CLUSTER', 'MYID');
  await cluster.call(to, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', fromId);
  await cluster.call(from, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', toId);
  for (;;) {
    const keys = await cluster.call(from, 'CLUSTER', 'GETKEYSINSLOT', slot, batch);
    if (keys.length === 0) break;
    assert.equal(await cluster.call(from, 'MIGRATE', '127.0.0.1', to, '', 0, 10000, 'AUTH',
                                    REDIS_PASSWORD, 'KEYS', ...keys), 'OK');
    await sleep(pauseMs);
  }
  for (const port of [to, from, ...(await masters()).filter((p) => p !== to && p !== from)]) {
    await cluster.call(port, 'CLUSTER', 'SETSLOT', slot, 'NODE', toId);
  }
  return true;
}

// How many slots `port` serves, as the seed's CLUSTER SHARDS says.
async function slotsServedBy(port) {
  let n = 0;
  for (const shard of await cluster.call(seed, 'CLUSTER', 'SHARDS')) {
    const s = flatMap(shard);
    if (!s.nodes.map(flatMap).some((node) => node.port === port && node.role === 'master')) continue;
    for (let i = 0; i + 1 < s.slots.length; i += 2) n += s.slots[i + 1] - s.slots[i] + 1;
  }
  return n;
}

// The slots every discovery read of alice touches: the namespace's, hers, every connection's.
async function readSlots() {
  const slots = new Set([await cluster.call(seed, 'CLUSTER', 'KEYSLOT', `quiver:{${NS}}:layout`),
                         await memberSlot()]);
  for (const { id } of upstreams) slots.add((await masterOfConnection(id)).slot);
  return [...slots];
}

test('f: a fourth master added and the cluster rebalanced onto it mid-traffic, then every slot read moved at once: every answer whole', async () => {
  await cluster.forgetFailed();  // the master d killed
  // What every answer must be: the list as the agent serves it now (after e's tools).
  const now = await agent.request('GET', '/v1/manifests', { headers: auth() });
  assert.equal(now.status, 200, now.text);
  baseline = entries(now.json);
  const added = await cluster.addMaster({ ns: NS, edgePassword: EDGE_REDIS_PASSWORD });
  const slots = await readSlots();
  const before = await Promise.all(edges.map(healthz));
  let done = false;
  const reads = readLoop(() => done);
  try {
    await rebalanceOnto(added, slots, reads, () => { done = true; }, before);
  } finally {
    done = true;
    await reads.catch(() => {});
  }
});

async function rebalanceOnto(added, slots, reads, stop, before) {
  await sleep(500);
  // As an operator scales out: redis-cli moves a quarter of the slots to the empty master, each
  // slot's keys in MIGRATEs of its default pipeline (10), while both edges, the replica edge and
  // the agent are read and the writers write (readLoop).
  const t0 = Date.now();
  const rebalanced = await cluster.cli('rebalance', `127.0.0.1:${seed}`, '--cluster-use-empty-masters');
  const rebalanceMs = Date.now() - t0;
  const movedByRebalance = [];
  for (const slot of slots) {
    if ((await cluster.shardOf(slot, seed)).master === added) movedByRebalance.push(slot);
  }
  // Then every slot the reads touch and the rebalance left, all at once, two keys at a time.
  const rest = slots.filter((slot) => !movedByRebalance.includes(slot));
  await Promise.all(rest.map((slot) => migrateSlot(slot, added, { batch: 2, pauseMs: 150 })));
  await cluster.waitUntilOk({ replicas: false });
  await sleep(1000);
  stop();
  const answers = await reads;
  const served = await slotsServedBy(added);
  assert.ok(served > 4000, `the new master serves ${served} slots: ${rebalanced}`);
  for (const slot of slots) {
    assert.equal((await cluster.shardOf(slot, seed)).master, added, `slot ${slot} moved`);
  }
  console.log(`      rebalance: ${served} slots to the new master in ${rebalanceMs} ms ` +
              `(${movedByRebalance.length} of the ${slots.length} slots read); then ` +
              `${rest.length} at once, key by key`);
  console.log(`      ${checkAnswers(answers)}`);
  for (const [i, w] of edges.entries()) {
    const h = await healthz(w);
    assert.ok(h.cluster.moved > before[i].cluster.moved, `edge ${i} followed MOVED: ${JSON.stringify(h.cluster)}`);
  }
  await untilRecovered(10000);
  // The agent still lists into the moved slots (all on the new master now): a tool added at every
  // upstream, refreshed and committed there, shows at every edge, the replica edge's too.
  await changeEveryUpstream('after_rebalance', [...edges, ...replicaEdges]);
}

test('g: a shard that lost its data mid-traffic (the connections\' master, then alice\'s): whole lists or 503, never one without its connections nor an empty one; the agent restores it', async () => {
  // The master serving the most connections. The namespace's slot (its record) and alice's (her
  // grants) are moved off it first: what it loses is a part of the namespace, which the namespace
  // record does not tell (a whole namespace lost is the store check's older case).
  const count = new Map();
  for (const { id } of upstreams) {
    const { master } = await masterOfConnection(id);
    count.set(master, (count.get(master) ?? 0) + 1);
  }
  const victim = [...count.entries()].sort((a, b) => b[1] - a[1])[0][0];
  const [other, third] = (await masters()).filter((p) => p !== victim);
  const nsSlot = await cluster.call(seed, 'CLUSTER', 'KEYSLOT', `quiver:{${NS}}:namespace`);
  await migrateSlot(nsSlot, third);
  await migrateSlot(await memberSlot(), other);
  await cluster.waitUntilOk({ replicas: false });
  const lost = await loseShard(victim);
  assert.ok(lost.length >= 2, `the victim served connections: ${lost}`);
  // Then alice's master (her grants, her version, her per-member manifest): her list is refused,
  // never "nothing granted".
  assert.equal((await cluster.shardOf(await memberSlot(), seed)).master, other);
  await loseShard(other);
  // The agent lists into the restored slots as before.
  await changeEveryUpstream('after_loss', [...edges, ...replicaEdges]);
});

// FLUSHALL at `victim` (a master: its replicas follow) while readLoop reads every edge and the
// agent: every answer is every connection (one whose listing the loss took `pending` or `error`
// until listed again) or 503 STORE_UNAVAILABLE; the agent says what it found gone and restores
// the namespace; every reader serves every connection with its manifest again. The connections
// the victim served.
async function loseShard(victim) {
  const now = await agent.request('GET', '/v1/manifests', { headers: auth() });
  assert.equal(now.status, 200, now.text);
  baseline = entries(now.json);
  const want = Object.keys(baseline).sort();
  const lost = [];
  for (const { id } of upstreams) if ((await masterOfConnection(id)).master === victim) lost.push(id);
  const aliceLost = (await cluster.shardOf(await memberSlot(), seed)).master === victim;
  const logsBefore = logs.length;
  const restoresBefore = logs.filter((l) => l.includes('namespace restored')).length;
  let done = false;
  const answers = [];
  const reads = readLoop(() => done, () => true, answers);
  try {
    await sleep(500);
    assert.equal(await cluster.call(victim, 'FLUSHALL'), 'OK');
    const flushedAt = Date.now();
    await waitFor('the agent finds the versions gone and restores the namespace', () =>
      logs.filter((l) => l.includes('namespace restored')).length > restoresBefore, 30000);
    const restoredAt = Date.now();
    // The lost listings come back (the agent seeds the shared ones, alice's read queues hers).
    await waitFor('the agent and every edge serve every connection with its manifest again', async () => {
      for (const w of [agent, ...edges, ...replicaEdges]) {
        const r = await w.request('GET', '/v1/manifests', { headers: auth() });
        const got = entries(r.json);
        if (r.status !== 200 || JSON.stringify(Object.keys(got).sort()) !== JSON.stringify(want) ||
            want.some((id) => !got[id].manifest)) {
          return false;
        }
      }
      return true;
    }, 60000);
    await sleep(300);
    done = true;
    await reads;
    const bad = [];
    for (const a of answers) {
      let why = null;
      if (a.status === 503) {
        why = a.code === 'STORE_UNAVAILABLE' ? null : `503 ${a.code}`;
      } else if (a.status !== 200) {
        why = `status ${a.status} ${a.code}`;
      } else {
        const ids = Object.keys(a.entries).sort();
        if (JSON.stringify(ids) !== JSON.stringify(want)) why = `connections ${ids} (want ${want})`;
        for (const id of want) {
          if (!why && !a.entries[id].manifest && !['pending', 'error'].includes(a.statuses[id])) {
            why = `${id} without its manifest, status ${a.statuses[id]}`;
          }
        }
      }
      if (why) bad.push(`${a.edge} at ${a.at - flushedAt} ms after the FLUSHALL: ${why}`);
    }
    assert.deepEqual(bad.slice(0, 5), [], `${bad.length} of ${answers.length} answers wrong`);
    const after = answers.filter((a) => a.start >= flushedAt);
    const refused = after.filter((a) => a.status === 503).length;
    assert.ok(refused > 0, 'reads after the loss were refused until the restore');
    const pending = after.filter((a) => a.status === 200 && want.some((id) => !a.entries[id].manifest));
    console.log(`      master ${victim} flushed (${lost.length} connections${aliceLost ? ', alice\'s grants' : ''}): ` +
                `restored ${restoredAt - flushedAt} ms after; ${after.length} answers since, ` +
                `${refused} 503, ${pending.length} with a connection pending`);
    assert.ok(logs.slice(logsBefore).some((l) => l.includes('are gone (a part of the store lost its data')),
              'the agent said what it found');
    for (const id of lost) {
      assert.equal(await cluster.call(victim, 'EXISTS', connSlotKey(id)), 1, `${id}'s record is back`);
    }
  } finally {
    done = true;
    await reads.catch(() => {});
  }
  return lost;
}

// ---- runner ------------------------------------------------------------------------------------

// `PER_MASTER` connection ids for each of the three masters, by the slot of their v2 tag.
async function connectionIdsOnEveryMaster() {
  const byMaster = new Map();
  for (const m of await masters()) byMaster.set(m, []);
  for (let i = 0; byMaster.size && [...byMaster.values()].some((v) => v.length < PER_MASTER); i++) {
    assert.ok(i < 1000, 'ids found');
    const id = `conn-${i}`;
    const { master } = await masterOfConnection(id);
    if (byMaster.get(master).length < PER_MASTER) byMaster.get(master).push(id);
  }
  return [...byMaster.values()].flat().sort();
}

async function main() {
  const agentBinary = agentBinaryOrSkip();
  skipUnlessInstalled('redis-server', ['--version']);
  skipUnlessInstalled('redis-cli', ['--version']);
  const started = Date.now();
  let failed = 0;
  try {
    dir = mkdtempSync(path.join(os.tmpdir(), 'quiver-cluster-v2-'));
    cluster = await RedisCluster.start({ password: REDIS_PASSWORD });
    const { owner } = await cluster.prepareForEdges(NS, EDGE_REDIS_PASSWORD);
    // The seed: a master serving neither the namespace's slot nor alice's (the faults below hit
    // the master of alice's slot, which every read's first round reads).
    const memberMaster = (await cluster.shardOf(await memberSlot(), owner)).master;
    seed = (await masters()).find((p) => p !== owner && p !== memberMaster);
    for (const id of await connectionIdsOnEveryMaster()) {
      const control = path.join(dir, `${id}.ctl`);
      writeFileSync(control, '');
      upstreams.push({ id, tools: 2, control });
    }
    // A per-member connection: alice's manifest of it is in alice's slot (listed with her
    // credential, its tools named after her).
    perm = await HttpUpstream.start(['--per-auth', '--auth-users', 'alice'], { logs });
    upstreams.push({ id: 'perm', server: { type: 'http', url: perm.url },
                     connection: { credential_mode: 'per_member', auth: 'bearer',
                                   allow_private_addresses: true,
                                   credentials: { alice: { env: 'CL_PERM_ALICE' } } } });
    agent = await startClusterAgent({ binary: agentBinary, logs, cluster, ns: NS, kid: KID,
                                      secret: SECRET, password: REDIS_PASSWORD, upstreams,
                                      env: { CL_PERM_ALICE: PERM_CREDENTIAL },
                                      runtime: { store_check_interval_ms: 200, revalidate_window_ms: 100 } });
    token = agent.token('alice');
    await waitForFresh(agent, token, upstreams.length);
    const v1 = entries((await agent.request('GET', '/v1/manifests', { headers: auth() })).json);
    // The running agent's namespace moved to v2; its engine reloads into v2 on its own.
    const migrated = execFileSync(agentBinary, ['migrate-layout', 'v2', '--settle', '1s', '--config',
                                                agent.configFile], { env: agent.env, encoding: 'utf8' });
    assert.ok(migrated.includes('v2:ready:'), migrated);
    await waitFor('the agent reloads into v2', () => logs.some((l) => l.includes('reloaded')), 30000);
    await waitForFresh(agent, token, upstreams.length);
    baseline = entries((await agent.request('GET', '/v1/manifests', { headers: auth() })).json);
    assert.deepEqual(baseline, v1, 'the agent serves what it served on v1');
    const env = edgeEnv({
      ns: NS, kid: KID, secret: SECRET, redisPort: seed, edgeRedisPassword: EDGE_REDIS_PASSWORD,
      l1TtlMs: L1_TTL_MS, extra: { REDIS_CLUSTER: '1' } });
    edges.push(...await startEdges(2, { edgeDir, env, logs }));
    replicaEdges.push(...await startEdges(1, { edgeDir, logs, env: { ...env, QUIVER_REDIS_REPLICA_READS: '1' } }));
    for (const w of [...edges, ...replicaEdges]) await waitForFresh(w, token, upstreams.length);
    console.log(`      connections ${upstreams.map((u) => u.id).join(' ')}, seed ${seed}`);
    failed += await runTests(tests, only);
  } finally {
    for (const w of [...edges, ...replicaEdges]) await w.stop();
    await agent?.stop();
    await perm?.stop();
    await cluster?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
  finish({ failed, count: tests.length, started, logs,
           secrets: [SECRET, REDIS_PASSWORD, EDGE_REDIS_PASSWORD, PERM_CREDENTIAL] });
}

main().catch(crashed(logs));
