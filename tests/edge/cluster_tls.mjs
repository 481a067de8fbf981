// The edge over TLS to a real Redis Cluster (issue 14, "TLS to the cluster works"):
//
//   a real upstream → quiver-agent serve (rediss+cluster://, the test CA as redis_tls.ca_file)
//   → six redis-servers in cluster mode listening for TLS only (`port 0`, `tls-port`,
//   `tls-cluster yes`, `tls-replication yes`; three masters, three replicas) → quiver-edge in
//   workerd (REDIS_CLUSTER=1 + REDIS_TLS=1, trusting the test CA, seeded at a master that does NOT
//   serve the namespace's slot) → HTTP client
//
//   node tests/edge/cluster_tls.mjs [--edge-dir build/wasm/edge] [--agent .../quiver-agent]
//                                   [--only substring]
//
// Registered as the ctest `wasm.edge_cluster_tls` (wasm-worker/CMakeLists.txt). Exit status 0 when
// every test passed, 77 (ctest SKIP_RETURN_CODE) when the native agent, redis-server, redis-cli or
// openssl is absent. The certificates (a private CA, a certificate for localhost and 127.0.0.1) are
// made per run by openssl; every server binds 127.0.0.1. No node has a plain TCP port, so whatever
// the edge and the agent read they read over TLS, at the TLS ports CLUSTER SHARDS announces. The
// tests: discovery at the edge equals the agent's (same manifest, same ETag) after the edge learned
// the slot's node from its seed's map; a tools/call relayed through the slot's master; a CLUSTER
// FAILOVER of that master followed through MOVED to the promoted replica's TLS port, every read
// answered; an edge without REDIS_TLS, or not trusting the nodes' CA, answers 503
// STORE_UNAVAILABLE, never an empty list (the latter without retries: its log names the TLS
// handshake, which the worker tells from a refused connection); nodes that announce a hostname,
// with certificates for that name alone, are dialled and verified by name (last: it changes the
// nodes' certificates).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { agentBinaryOrSkip, startClusterAgent } from './agent.mjs';
import {
  Redis, RedisCluster, Workerd, argValue, crashed, edgeDirArg, edgeEnv, finish, flatMap,
  makeTestCertificates, readFromRedis, runTests, skipUnlessInstalled, sleep,
  stageEdgeTrustingTestCa, waitFor, waitForFresh,
} from './harness.mjs';

const edgeDir = edgeDirArg();
const only = argValue('--only', '');

const NS = 'clustls';
const KID = 'clustls-1';
const SECRET = 'cluster-tls-e2e-caller-token-secret-0123456789';
const REDIS_PASSWORD = 'cluster-tls-redis-password';  // the agent's (default) user, on every node
const EDGE_REDIS_PASSWORD = 'cluster-tls-edge-redis-password';  // schema/redis-acl-edge.txt's user
const L1_TTL_MS = 50;  // short: the reads below reach Redis

let dir;          // certificates and the staged worker trusting their CA
let certs;        // {ca, cert, key}
let config;       // the staged workerd.capnp
let cluster;      // RedisCluster (TLS only)
let agent;        // Agent
let edge;         // Workerd
let edgeEnvTls;   // its environment
const logs = [];
let token;
let slot;         // the namespace's
let seed;         // the edge's seed: a master that does not serve `slot`
const auth = () => ({ authorization: `Bearer ${token}` });

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

const entry = (res) => res.json?.connections?.find((c) => c.id === 't');

async function healthz(w) {
  return (await w.request('GET', '/healthz')).json;
}

// Lua scripts run at a node (the discovery read is one or more).
const scripts = (c) => (c.evalsha ?? 0) + (c.eval ?? 0) + (c.evalsha_ro ?? 0) + (c.eval_ro ?? 0);

test('only TLS exists: CLUSTER SHARDS announces TLS ports alone, plain TCP is refused',
     async () => {
  for (const shard of await cluster.call(seed, 'CLUSTER', 'SHARDS')) {
    for (const n of flatMap(shard).nodes.map(flatMap)) {
      assert.ok(cluster.ports.includes(n['tls-port']), JSON.stringify(n));
      assert.ok(!n.port, `no plain port announced: ${JSON.stringify(n)}`);
    }
  }
  // A plain client at a node's port: the TLS server drops what is not a handshake.
  await assert.rejects(async () => {
    const plain = await Redis.connect(seed, REDIS_PASSWORD);
    plain.close();
  });
});

test('discovery at the edge, seeded off the slot over TLS, equals the agent\'s', async () => {
  const fromAgent = entry(await agent.request('GET', '/v1/manifests', { headers: auth() }));
  assert.ok(fromAgent?.manifest, 'the agent serves t');
  const { master } = await cluster.shardOf(slot);
  const before = await cluster.commandCalls(master);
  const res = await edge.request('GET', '/v1/manifests', { headers: auth() });
  assert.equal(res.status, 200, res.text);
  const e = entry(res);
  assert.equal(e.etag, fromAgent.etag);
  assert.equal(JSON.stringify(e.manifest), JSON.stringify(fromAgent.manifest));
  const one = await edge.request('GET', '/v1/mcp-connections/t/manifest', { headers: auth() });
  assert.equal(one.status, 200, one.text);
  assert.equal(JSON.stringify(one.json.manifest), JSON.stringify(fromAgent.manifest));
  const oneFromAgent = await agent.request('GET', '/v1/mcp-connections/t/manifest',
                                           { headers: auth() });
  assert.ok(one.headers.etag, 'an ETag');
  assert.equal(one.headers.etag, oneFromAgent.headers.etag);
  const h = await healthz(edge);
  assert.equal(h.cluster.slot, slot);
  assert.equal(h.cluster.map_known, true);
  assert.ok(h.cluster.refreshes >= 1, JSON.stringify(h.cluster));
  // The reads ran on the slot's master (there is no other way in than its TLS port).
  const after = await cluster.commandCalls(master);
  assert.ok(scripts(after) > scripts(before), 'the discovery scripts ran on the slot\'s master');
});

test('a tools/call through the edge is relayed over TLS to the agent', async () => {
  const res = await edge.request('POST', '/mcp', {
    headers: { ...auth(), 'content-type': 'application/json',
               accept: 'application/json, text/event-stream',
               'mcp-protocol-version': '2025-06-18' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call',
                           params: { name: 't__tool_1', arguments: {} } }) });
  assert.equal(res.status, 200, res.text);
  const reply = res.headers['content-type']?.startsWith('text/event-stream')
    ? JSON.parse(res.text.split('\n').find((l) => l.startsWith('data: ')).slice(6)) : res.json;
  assert.equal(reply.id, 7, res.text);
  assert.equal(reply.result?.content?.[0]?.text, 'called tool_1', res.text);
});

test('a CLUSTER FAILOVER mid-traffic is followed through MOVED to a TLS port, every read answered',
     async () => {
  const { master, replicas } = await cluster.shardOf(slot);
  assert.ok(replicas.length, 'the slot has a replica');
  const before = await healthz(edge);
  let done = false;
  const answers = [];
  const reads = (async () => {
    while (!done) {
      const res = await edge.request('GET', '/v1/manifests', { headers: auth() });
      answers.push({ status: res.status, source: res.headers['x-quiver-cache'],
                     code: res.json?.error?.code, entry: entry(res),
                     count: res.json?.connections?.length });
    }
  })();
  try {
    await sleep(300);
    await cluster.failover(replicas[0]);
    await cluster.waitUntilOk({ replicas: false });
    await sleep(500);
  } finally {
    done = true;
    await reads;
  }
  assert.equal((await cluster.shardOf(slot)).master, replicas[0], 'the replica took over');
  assert.ok(answers.length > 10, `${answers.length} reads`);
  const bad = answers.filter((a) => a.status !== 200 || a.count !== 1 || !a.entry?.manifest);
  assert.deepEqual(bad, [], 'every read answered with the manifest');
  const h = await healthz(edge);
  assert.ok(h.cluster.moved > before.cluster.moved,
            `the edge followed MOVED: ${JSON.stringify(h.cluster)} (old master ${master})`);
  // And reads reach the new master, at its TLS port.
  const newBefore = await cluster.commandCalls(replicas[0]);
  await sleep(L1_TTL_MS * 2);
  const res = await edge.request('GET', '/v1/manifests', { headers: auth() });
  assert.equal(res.status, 200, res.text);
  assert.ok(readFromRedis(res.headers['x-quiver-cache']), res.headers['x-quiver-cache']);
  const newAfter = await cluster.commandCalls(replicas[0]);
  assert.ok(scripts(newAfter) > scripts(newBefore), 'the read ran on the promoted replica');
  const fromAgent = entry(await agent.request('GET', '/v1/manifests', { headers: auth() }));
  assert.equal(entry(res).etag, fromAgent.etag);
  assert.equal(JSON.stringify(entry(res).manifest), JSON.stringify(fromAgent.manifest));
});

test('an edge without REDIS_TLS on the TLS cluster: 503 STORE_UNAVAILABLE, never an empty list',
     async () => {
  const plain = await Workerd.start({ config, logs, env: { ...edgeEnvTls, REDIS_TLS: '' } });
  try {
    const res = await plain.request('GET', '/v1/manifests', { headers: auth() });
    assert.equal(res.status, 503, res.text);
    assert.equal(res.json?.error?.code, 'STORE_UNAVAILABLE', res.text);
  } finally {
    await plain.stop();
  }
});

test('an edge that does not trust the nodes\' CA (the staged browsers\' CAs): 503, never a list',
     async () => {
  const untrusting = await Workerd.start({ config: path.join(edgeDir, 'workerd.capnp'), logs,
                                          env: edgeEnvTls });
  try {
    const before = logs.length;
    const res = await untrusting.request('GET', '/v1/manifests', { headers: auth() });
    assert.equal(res.status, 503, res.text);
    assert.equal(res.json?.error?.code, 'STORE_UNAVAILABLE', res.text);
    await sleep(100);
    // workerd refused the handshake (the certificate's issuer is unknown to it); the edge said
    // the store is down, not what it would be with a working socket, and why: the node accepts
    // TCP (the worker's probe) and refused TLS, which no retry changes, so none was made.
    const logged = logs.slice(before).join('\n');
    assert.match(logged, /TLS handshake failed: invalid peer certificate/);
    assert.match(logged, /STORE_UNAVAILABLE: redis cluster: not retried: .*TLS handshake failed/);
    assert.match(logged, /TLS handshake failed with 127\.0\.0\.1:\d+ \(it accepts TCP\)/);
    const h = await healthz(untrusting);
    assert.equal(h.cluster.retries, 0, JSON.stringify(h.cluster));
    assert.equal(h.cluster.map_known, false, JSON.stringify(h.cluster));
  } finally {
    await untrusting.stop();
  }
});

test('nodes that announce a hostname (as hosted clusters do), their certificates naming only it: ' +
     'the edge dials and verifies the name', async () => {
  const fromAgent = entry(await agent.request('GET', '/v1/manifests', { headers: auth() }));
  // Every node announces `localhost` as its preferred endpoint and presents a certificate for the
  // name alone (no IP address in it): a client dialling 127.0.0.1 cannot verify it.
  const named = makeTestCertificates(dir, { name: 'named', san: 'DNS:localhost' });
  for (const port of cluster.alive()) {
    await cluster.call(port, 'CONFIG', 'SET', 'cluster-announce-hostname', 'localhost',
                       'cluster-preferred-endpoint-type', 'hostname', 'tls-cert-file', named.cert,
                       'tls-key-file', named.key);
  }
  await waitFor('every node announces localhost', async () => {
    for (const port of cluster.alive()) {
      for (const shard of await cluster.call(port, 'CLUSTER', 'SHARDS')) {
        const nodes = flatMap(shard).nodes.map(flatMap);
        if (!nodes.every((n) => n.endpoint === 'localhost')) return false;
      }
    }
    return true;
  }, 30000);
  const byName = await Workerd.start({ config, logs,
                                       env: { ...edgeEnvTls, REDIS_HOST: 'localhost' } });
  const byAddress = await Workerd.start({ config, logs, env: edgeEnvTls });
  try {
    const res = await byName.request('GET', '/v1/manifests', { headers: auth() });
    assert.equal(res.status, 200, res.text);
    assert.equal(entry(res).etag, fromAgent.etag);
    assert.equal(JSON.stringify(entry(res).manifest), JSON.stringify(fromAgent.manifest));
    assert.equal((await healthz(byName)).cluster.map_known, true);
    // The same edge seeded at the address: its seed's certificate does not name 127.0.0.1.
    const before = logs.length;
    const refused = await byAddress.request('GET', '/v1/manifests', { headers: auth() });
    assert.equal(refused.status, 503, refused.text);
    assert.equal(refused.json?.error?.code, 'STORE_UNAVAILABLE', refused.text);
    await sleep(100);
    assert.match(logs.slice(before).join('\n'), /TLS handshake failed: invalid peer certificate/);
  } finally {
    await byName.stop();
    await byAddress.stop();
  }
});

// ---- runner ------------------------------------------------------------------------------------

async function main() {
  const agentBinary = agentBinaryOrSkip();
  skipUnlessInstalled('redis-server', ['--version']);
  skipUnlessInstalled('redis-cli', ['--version']);
  skipUnlessInstalled('openssl', ['version']);
  const started = Date.now();
  let failed = 0;
  dir = mkdtempSync(path.join(os.tmpdir(), 'quiver-edge-cluster-tls-'));
  try {
    certs = makeTestCertificates(dir);
    config = stageEdgeTrustingTestCa(edgeDir, dir);
    cluster = await RedisCluster.start({ password: REDIS_PASSWORD, tls: certs });
    ({ slot, seed } = await cluster.prepareForEdges(NS, EDGE_REDIS_PASSWORD));
    agent = await startClusterAgent({ binary: agentBinary, logs, cluster, ns: NS, kid: KID,
                                      secret: SECRET, password: REDIS_PASSWORD });
    token = agent.token('alice');
    await waitForFresh(agent, token, 1);
    edgeEnvTls = edgeEnv({
      ns: NS, kid: KID, secret: SECRET, redisPort: seed, edgeRedisPassword: EDGE_REDIS_PASSWORD,
      l1TtlMs: L1_TTL_MS, extra: { REDIS_CLUSTER: '1', REDIS_TLS: '1' } });
    edge = await Workerd.start({ config, env: edgeEnvTls, logs });
    await waitForFresh(edge, token, 1);
    failed += await runTests(tests, only);
  } finally {
    await edge?.stop();
    await agent?.stop();
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  finish({ failed, count: tests.length, started, logs,
           secrets: [SECRET, REDIS_PASSWORD, EDGE_REDIS_PASSWORD] });
}

main().catch(crashed(logs));
