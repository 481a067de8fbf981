// The whole chain, end to end, with nothing written by hand into Redis:
//
//   real upstreams → quiver-agent serve (Redis) → redis-server → quiver-edge in workerd ×2
//   → HTTP client
//
//   node tests/edge/chain.mjs [--edge-dir build/wasm/edge] [--agent build/native/.../quiver-agent]
//                             [--only substring]
//
// Registered as the ctest `wasm.edge_chain` (wasm-worker/CMakeLists.txt). Exit status 0 when every
// test passed, 77 (ctest SKIP_RETURN_CODE) when the native quiver-agent is not built.
//
// Upstreams (all real processes, started by the agent or by this test):
//   everything  server-everything over stdio, shared
//   memory      server-memory over stdio, shared
//   counted     tests/peers/test-upstream.mjs over stdio, shared, with --stats-file (how many
//               tools/list it answered) and --control (tools added at runtime, list_changed)
//   perm        test-upstream over Streamable HTTP with --per-auth, per_member: the agent lists
//               it with each member's own bearer credential (alice's from the environment, bob's
//               from a file), and the upstream names its tools after the caller
// Members and grants differ per member; `dave` holds a valid token but no grant. Tokens are
// minted by the agent (`quiver-agent token`) and verified by the edge with the same key. The
// fresh TTL is short (5 s, the agent's and the edge's), so manifests turn stale within the test;
// after its first pass the agent's maintenance is off, so every listing is caused by the test.
// The tests: every member × every connection on both edges (granted ones only, per-member
// manifests each member's own, ungranted 404 like nonexistent); stale-while-revalidate (200
// concurrent stale reads, one revalidation, one upstream tools/list, fresh again); refresh-tools
// at the edge; a tool added at runtime (list_changed); the edge's manifests equal the agent's
// (same ETag) and what the upstream lists; a preference toggled through the agent hidden at the
// edge within the L1 TTL.
import assert from 'node:assert/strict';
import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

import {
  Agent, HttpUpstream, agentBinaryOrSkip, nodeModules, testUpstreamScript, upstreamStats,
} from './agent.mjs';
import {
  Layout, argValue, crashed, edgeDirArg, edgeEnv, finish, mintToken, repoRoot, runTests,
  signWebhook, sleep, startEdgeRedis, startEdges,
} from './harness.mjs';

const edgeDir = edgeDirArg();
const only = argValue('--only', '');

const NS = 'chain';
const KID = 'chain-1';
const SECRET = 'chain-e2e-caller-token-secret-0123456789abc';
const REDIS_PASSWORD = 'chain-redis-password';  // the agent's (default) user
const EDGE_REDIS_PASSWORD = 'chain-edge-redis-password';  // the edges' user: schema/redis-acl-edge.txt
const FRESH_TTL_MS = 5000;
const L1_TTL_MS = 500;
const EDGE_WINDOW_MS = 4000;  // QUIVER_REVALIDATE_WINDOW_MS: one queued revalidation per window
const COUNTED_TOOLS = 3;
const LISTING_DELAY_MS = 2500;  // counted's list delay in the SWR burst (< the 3 s request timeout)
const layout = new Layout(NS);

const WEBHOOK_SECRET = 'chain-webhook-secret-0123456789abcdef';
const GRANTS = {
  alice: ['counted', 'everything', 'perm'],
  bob: ['counted', 'perm'],
  carol: ['everything', 'memory'],
  dave: [],
};
const MEMBERS = Object.keys(GRANTS);
const CONNECTIONS = ['counted', 'everything', 'memory', 'perm'];
const PER_MEMBER = new Set(['perm']);

let redis;        // RedisServer
let db;           // Redis client
let agent;        // Agent
let permUpstream; // HttpUpstream
const edges = []; // Workerd × 2
let tmp;
let statsFile;
let controlFile;
const logs = [];
const tokens = {};
const auth = (member) => ({ authorization: `Bearer ${tokens[member]}` });

const entryOf = (res) => res.json?.connections?.[0] ?? res.json;
const toolNames = (entry) => (entry?.manifest?.tools?.items ?? []).map((t) => t.name).sort();
const counted = () => upstreamStats(statsFile);

async function deadline(what, probe, timeoutMs = 20000, everyMs = 50) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      const v = await probe();
      if (v) return v;
      last = undefined;
    } catch (e) {
      last = e;
    }
    await sleep(everyMs);
  }
  throw new Error(`${what}: not within ${timeoutMs} ms${last ? `: ${last.message}` : ''}`);
}

async function edgeManifest(member, cid, w = edges[0]) {
  return w.request('GET', `/v1/mcp-connections/${cid}/manifest`, { headers: auth(member) });
}

// Waits until nothing is in flight: no request open on either edge, no lease on the key, the
// revalidation stream fully delivered and acknowledged by the agent.
async function settled(cid) {
  await deadline(`${cid} settles`, async () => {
    for (const w of edges) {
      if ((await w.request('GET', '/healthz')).json?.open_requests !== 0) return false;
    }
    if (await db.call('EXISTS', layout.lease(cid, 'shared'))) return false;
    const last = await db.call('XREVRANGE', layout.revalidate(), '+', '-', 'COUNT', '1');
    if (!last.length) return true;
    const groups = await db.call('XINFO', 'GROUPS', layout.revalidate());
    const group = groups.map((g) => {
      const o = {};
      for (let i = 0; i < g.length; i += 2) o[g[i]] = g[i + 1];
      return o;
    }).find((g) => g.name === 'quiver-agents');
    return group && group.pending === 0 && group['last-delivered-id'] === last[0][0];
  });
}

// How many revalidation requests were ever added to the stream (the agent deletes the ones it
// handled; Redis 7 keeps the count).
async function streamEntriesAdded() {
  if (!await db.call('EXISTS', layout.revalidate())) return 0;
  const info = await db.call('XINFO', 'STREAM', layout.revalidate());
  return info[info.indexOf('entries-added') + 1];
}

// Appends a control command to counted's control file and waits until the upstream applied it.
async function control(command) {
  const applied = counted().control_commands;
  appendFileSync(controlFile, `${JSON.stringify(command)}\n`);
  await deadline(`counted applies ${JSON.stringify(command)}`, async () =>
    counted().control_commands > applied);
}

const manifestField = (cid, principal, field) =>
  db.call('HGET', layout.manifest(cid, principal), field);

// ---- tests -------------------------------------------------------------------------------------

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

test('every granted manifest is listed by the agent and served by the edge', async () => {
  // The first reads are misses for the per-member manifests: the edge queues them, the agent
  // lists them with each member's credential.
  for (const member of MEMBERS) {
    await deadline(`${member}'s manifests`, async () => {
      const res = await edges[0].request('GET', '/v1/manifests', { headers: auth(member) });
      assert.equal(res.status, 200, res.text);
      return res.json.connections.every((c) => c.manifest);
    });
  }
});

test('principal isolation: every member × every connection, on both edges', async () => {
  const nonexistent = await edgeManifest('alice', 'no-such-connection');
  assert.equal(nonexistent.status, 404);
  assert.equal(nonexistent.json.error.code, 'NOT_FOUND');
  const permTools = {};
  for (const w of edges) {
    for (const member of MEMBERS) {
      const list = await w.request('GET', '/v1/manifests', { headers: auth(member) });
      assert.equal(list.status, 200, list.text);
      assert.equal(list.json.principal, `member/${member}`);
      assert.deepEqual(list.json.connections.map((c) => c.id), GRANTS[member], member);
      for (const cid of CONNECTIONS) {
        const res = await edgeManifest(member, cid, w);
        const where = `${member} × ${cid}`;
        if (!GRANTS[member].includes(cid)) {
          assert.equal(res.status, 404, where);
          assert.deepEqual(res.json, nonexistent.json, `${where}: same body as nonexistent`);
          continue;
        }
        assert.equal(res.status, 200, `${where}: ${res.text}`);
        const entry = entryOf(res);
        assert.equal(entry.id, cid);
        assert.equal(entry.principal, PER_MEMBER.has(cid) ? `member/${member}` : 'shared', where);
        assert.ok(['fresh', 'stale'].includes(entry.status), `${where}: ${entry.status}`);
        const names = toolNames(entry);
        assert.ok(names.length > 0, where);
        if (cid === 'perm') {
          // Named by the upstream after the credential the agent listed with.
          assert.deepEqual(names, Array.from({ length: 3 }, (_, i) => `${member}_tool_${i + 1}`));
          for (const other of MEMBERS) {
            if (other !== member) assert.ok(!res.text.includes(`${other}_tool`), where);
          }
          permTools[member] = { names, etag: entry.etag };
        } else if (cid === 'counted') {
          assert.deepEqual(names, Array.from({ length: COUNTED_TOOLS }, (_, i) => `tool_${i + 1}`));
        } else if (cid === 'everything') {
          assert.ok(names.includes('echo'), names.join());
        } else if (cid === 'memory') {
          assert.ok(names.includes('create_entities'), names.join());
        }
        // The list and the single read agree.
        const inList = list.json.connections.find((c) => c.id === cid);
        assert.equal(inList.principal, entry.principal);
      }
    }
  }
  assert.notEqual(permTools.alice.etag, permTools.bob.etag, 'per-member manifests differ');
  // The agent listed per-member manifests only for the members granted them.
  for (const member of MEMBERS) {
    const stored = await db.call('EXISTS', layout.manifest('perm', `member/${member}`));
    assert.equal(stored, GRANTS[member].includes('perm') ? 1 : 0, member);
  }
  assert.equal(await db.call('EXISTS', layout.manifest('perm', 'shared')), 0);
});

test('SWR: 200 concurrent stale reads over two edges, one upstream listing, fresh again',
     async () => {
  // Stale, with no revalidation pending: the stored fresh_until has passed (as the edge sees it:
  // same TTL), no lease, no gate left by an earlier read, the stream drained.
  await deadline('counted turns stale and idle', async () => {
    const freshUntil = Number(await manifestField('counted', 'shared', 'fresh_until'));
    if (Date.now() < freshUntil + 100) return false;
    if (await db.call('EXISTS', layout.gate('counted', 'shared'))) return false;
    await settled('counted');
    return true;
  }, 30000);
  // A slow upstream: the listing the first stale read causes is still running when the last of
  // the 200 reads is answered, so every one of them is served the stale manifest.
  await control({ set: { delay_ms: LISTING_DELAY_MS } });
  const before = counted();
  const fetchedBefore = Number(await manifestField('counted', 'shared', 'fetched_at'));
  const queuedBefore = await streamEntriesAdded();
  const logFrom = logs.length;

  const conns = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  const readers = ['alice', 'bob'];
  const results = await Promise.all(Array.from({ length: 200 }, (_, i) =>
    edges[i % 2].request('GET', '/v1/mcp-connections/counted/manifest',
                         { headers: auth(readers[(i >> 1) % 2]), agent: conns })));
  conns.destroy();
  for (const res of results) {
    assert.equal(res.status, 200, res.text);
    const entry = entryOf(res);
    assert.equal(entry.status, 'stale', JSON.stringify({ ...entry, manifest: undefined }));
    assert.equal(entry.fetched_at, fetchedBefore);
    assert.equal(toolNames(entry).length, COUNTED_TOOLS);
  }

  // Fresh again at the edge, with a newer listing.
  const fresh = await deadline('the edge serves counted fresh again', async () => {
    const entry = entryOf(await edgeManifest('bob', 'counted', edges[1]));
    return entry.status === 'fresh' && entry.fetched_at > fetchedBefore ? entry : null;
  });
  assert.equal(toolNames(fresh).length, COUNTED_TOOLS);
  await settled('counted');
  await control({ set: { delay_ms: 100 } });
  const after = counted();
  assert.equal(after.pid, before.pid, 'the same upstream process');
  assert.equal(after.tools_list_calls, before.tools_list_calls + 1,
               'exactly one tools/list reached the upstream');
  // Nothing but these reads queues revalidations meanwhile (no maintenance pass, no change).
  assert.equal(await streamEntriesAdded(), queuedBefore + 1, 'exactly one revalidation queued');
  const handled = logs.slice(logFrom).filter((l) => / counted \(shared\)/.test(l));
  assert.equal(handled.length, 1, handled.join('\n'));
  assert.match(handled[0], /refreshed counted \(shared\) \(stale\)/);
});

test('POST refresh-tools at the edge: 202, the agent re-lists, a newer fetched_at', async () => {
  // A manual refresh re-queues once the gate of an earlier request is a second old.
  await deadline('gate old enough', async () => {
    const ttl = await db.call('PTTL', layout.gate('counted', 'shared'));
    return ttl < EDGE_WINDOW_MS - 1200;
  });
  await settled('counted');
  const before = counted().tools_list_calls;
  const fetchedBefore = Number(await manifestField('counted', 'shared', 'fetched_at'));
  const res = await edges[1].request('POST', '/v1/mcp-connections/counted/refresh-tools',
                                     { headers: auth('alice') });
  assert.equal(res.status, 202, res.text);
  assert.equal(res.json.status, 'queued');
  await deadline('the upstream is listed again', async () => counted().tools_list_calls > before);
  await deadline('the edge shows the newer listing', async () =>
    entryOf(await edgeManifest('alice', 'counted')).fetched_at > fetchedBefore);
  const denied = await edges[0].request('POST', '/v1/mcp-connections/counted/refresh-tools',
                                        { headers: auth('carol') });
  assert.equal(denied.status, 404);
});

test('a signed webhook at the edge: each granted member of a per-member connection re-listed',
     async () => {
  // The edge marks the connection once (marked:perm), whatever its number of grantees; each
  // member's next read at an edge sees its data stale and queues that member's refresh.
  const members = ['alice', 'bob'];
  const fetched = {};
  await deadline('both members have a perm manifest', async () => {
    for (const m of members) {
      fetched[m] = Number(await manifestField('perm', `member/${m}`, 'fetched_at') ?? 0);
    }
    return members.every((m) => fetched[m] > 0);
  });
  const body = JSON.stringify({ connection_id: 'perm', reason: 'deploy' });
  const headers = { 'content-type': 'application/json',
                    'x-quiver-signature': signWebhook(WEBHOOK_SECRET, NS, body) };
  const res = await edges[0].request('POST', '/v1/webhooks/refresh', { body, headers });
  assert.equal(res.status, 202, res.text);
  assert.deepEqual(res.json.refreshes,
                   [{ connection_id: 'perm', status: 'marked', marked_stale: true }]);
  // Each member's data is re-listed by the agent from a listing that started after the webhook
  // (queued by the member's own stale read at the edge); both edges then serve it fresh.
  for (const m of members) {
    await deadline(`perm re-listed for ${m}`, async () => {
      const entry = entryOf(await edgeManifest(m, 'perm', edges[1]));
      return entry.fetched_at > fetched[m] && entry.status === 'fresh';
    });
  }
  // A replay of the same signed request, at the other edge: refused.
  const again = await edges[1].request('POST', '/v1/webhooks/refresh', { body, headers });
  assert.equal(again.status, 401, again.text);
});

test('a tool added at runtime (list_changed) appears at the edge after the agent re-lists',
     async () => {
  const before = counted().tools_list_calls;
  const logFrom = logs.length;
  await control({ add_tool: 'added_at_runtime', description: 'added while the chain runs' });
  assert.ok(counted().tools.includes('added_at_runtime'));
  for (const w of edges) {
    const entry = await deadline('the edge shows the tool', async () => {
      const e = entryOf(await edgeManifest('bob', 'counted', w));
      return toolNames(e).includes('added_at_runtime') ? e : null;
    });
    const added = entry.manifest.tools.items.find((t) => t.name === 'added_at_runtime');
    assert.equal(added.description, 'added while the chain runs');
  }
  assert.ok(counted().tools_list_calls > before, 'listed again');
  assert.ok(logs.slice(logFrom).some((l) => /list_changed \(tools\) from counted/.test(l)),
            'the agent heard the notification');
});

test('the edge serves what the agent stored and the upstream lists (same ETag)', async () => {
  for (const member of MEMBERS) {
    for (const cid of GRANTS[member]) {
      // A listing may land between two reads (short TTL): compare once both show the same one.
      const [e, a] = await deadline(`${member} × ${cid}: edge and agent agree`, async () => {
        const fromEdge = entryOf(await edgeManifest(member, cid));
        const fromAgent = entryOf(await agent.request(
          'GET', `/v1/mcp-connections/${cid}/manifest`, { headers: auth(member) }));
        // The ETag names the content; a re-listing with the same content keeps it.
        const same = fromEdge.etag && fromEdge.etag === fromAgent.etag &&
                     fromEdge.fetched_at === fromAgent.fetched_at;
        return same ? [fromEdge, fromAgent] : null;
      }, 20000, 100);
      assert.deepEqual(e.manifest, a.manifest, `${member} × ${cid}`);
      // And what the upstream itself lists.
      if (cid === 'counted') {
        assert.deepEqual(toolNames(e), [...counted().tools].sort());
      } else {
        const live = await agent.request('POST', `/v1/mcp-connections/${cid}/test`,
                                         { headers: auth(member) });
        assert.equal(live.status, 200, live.text);
        assert.deepEqual(toolNames(e), live.json.result.manifest.tools.items.map((t) => t.name)
          .sort(), `${member} × ${cid}: as listed live`);
      }
    }
  }
});

test('a preference toggled through the agent hides the tool at the edge within the L1 TTL',
     async () => {
  const toggle = async (enabled) => {
    const res = await agent.request('PATCH', '/v1/mcp-connections/everything/preferences', {
      headers: { ...auth('alice'), 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'tool', key: 'echo', enabled }) });
    assert.equal(res.status, 200, res.text);
  };
  // Warm both edges' L1 with echo visible.
  for (const w of edges) {
    assert.ok(toolNames(entryOf(await edgeManifest('carol', 'everything', w))).includes('echo'));
  }
  await toggle(false);
  // Whatever an isolate cached before the toggle is past its L1 TTL now.
  await sleep(L1_TTL_MS + 50);
  for (const w of edges) {
    for (const member of ['alice', 'carol']) {
      const names = toolNames(entryOf(await edgeManifest(member, 'everything', w)));
      assert.ok(names.length > 0 && !names.includes('echo'), `${member}: ${names}`);
    }
  }
  await toggle(true);
  await sleep(L1_TTL_MS + 50);
  for (const w of edges) {
    assert.ok(toolNames(entryOf(await edgeManifest('carol', 'everything', w))).includes('echo'));
  }
  // carol is granted `everything` but is no operator: refused, and nothing changes.
  const refused = await agent.request('PATCH', '/v1/mcp-connections/everything/preferences', {
    headers: { ...auth('carol'), 'content-type': 'application/json' },
    body: JSON.stringify({ type: 'tool', key: 'echo', enabled: false }) });
  assert.equal(refused.status, 403, refused.text);
  assert.equal(refused.json.error.code, 'FORBIDDEN');
});

test('a per-member toggle through the agent hides the tool at the edge from that member only',
     async () => {
  const perm = async (member, w) => toolNames(entryOf(await edgeManifest(member, 'perm', w)));
  await deadline('both members have a perm manifest at the edge', async () =>
    (await perm('alice', edges[0])).length > 0 && (await perm('bob', edges[0])).length > 0);
  const aliceTools = await perm('alice', edges[0]);
  const bobBefore = await perm('bob', edges[0]);
  const hidden = aliceTools[0];
  // bob's tool names are not alice's to toggle: the same 404 as a name nobody listed.
  const bobs = await agent.request('PATCH', '/v1/mcp-connections/perm/preferences', {
    headers: { ...auth('alice'), 'content-type': 'application/json' },
    body: JSON.stringify({ type: 'tool', key: bobBefore[0], enabled: false }) });
  assert.equal(bobs.status, 404, bobs.text);
  const mine = await agent.request('GET', '/v1/mcp-connections/perm/preferences',
                                   { headers: auth('alice') });
  assert.equal(mine.status, 200, mine.text);
  assert.ok(!mine.text.includes(bobBefore[0]), mine.text);
  const toggle = await agent.request('PATCH', '/v1/mcp-connections/perm/preferences', {
    headers: { ...auth('alice'), 'content-type': 'application/json' },
    body: JSON.stringify({ type: 'tool', key: hidden, enabled: false }) });
  assert.equal(toggle.status, 200, toggle.text);
  await sleep(L1_TTL_MS + 50);
  for (const w of edges) {
    assert.ok(!(await perm('alice', w)).includes(hidden), `alice still sees ${hidden}`);
    assert.deepEqual(await perm('bob', w), bobBefore);
  }
});

test('past the L1 TTL the edge checks its copy against the versions: revalidated until a change',
     async () => {
  const read = () => edgeManifest('carol', 'everything', edges[1]);
  // A refresh of `everything` committed meanwhile (the agent refreshes ahead) is a change, seen
  // as one; so wait for a quiet spell: two reads a TTL apart, the second answered from the copy.
  let copy;
  await deadline('a read answered from the checked copy', async () => {
    const first = await read();
    assert.equal(first.status, 200, first.text);
    await sleep(L1_TTL_MS + 50);
    copy = await read();
    assert.equal(copy.status, 200, copy.text);
    if (copy.headers['x-quiver-cache'] !== 'revalidated') return false;
    assert.equal(copy.text.replace(/"age_ms":\d+/g, ''), first.text.replace(/"age_ms":\d+/g, ''));
    return true;
  });
  const health = await edges[1].request('GET', '/healthz');
  assert.ok(health.json.l1.revalidated >= 1, health.text);
  // A change (carol's shared overlay: the connection's version moves) is seen at the next read
  // past the TTL, in the same round trip.
  assert.ok(toolNames(entryOf(copy)).includes('echo'));
  const toggle = async (enabled) => {
    const res = await agent.request('PATCH', '/v1/mcp-connections/everything/preferences', {
      headers: { ...auth('alice'), 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'tool', key: 'echo', enabled }) });
    assert.equal(res.status, 200, res.text);
  };
  await toggle(false);
  try {
    await sleep(L1_TTL_MS + 50);
    const after = await read();
    assert.equal(after.status, 200, after.text);
    assert.equal(after.headers['x-quiver-cache'], 'miss');
    assert.ok(!toolNames(entryOf(after)).includes('echo'), after.text);
    const counted = (await edges[1].request('GET', '/healthz')).json.l1.revalidate_changed;
    assert.ok(counted >= 1, `revalidate_changed ${counted}`);
  } finally {
    await toggle(true);
  }
});

// ---- runner ------------------------------------------------------------------------------------

function agentConfig() {
  const nm = nodeModules();
  return {
    mcpServers: {
      everything: {
        command: process.execPath,
        args: [`${nm}/@modelcontextprotocol/server-everything/dist/index.js`, 'stdio'],
      },
      memory: {
        command: process.execPath,
        args: [`${nm}/@modelcontextprotocol/server-memory/dist/index.js`],
        env: { MEMORY_FILE_PATH: path.join(tmp, 'memory.jsonl') },
      },
      counted: {
        command: process.execPath,
        args: [testUpstreamScript, 'stdio', '--tools', String(COUNTED_TOOLS), '--delay-ms', '100',
               '--stats-file', statsFile, '--control', controlFile, '--quiet'],
        env: { QUIVER_NODE_MODULES: nm },
      },
      perm: { type: 'http', url: permUpstream.url },
    },
    quiver: {
      namespace: NS,
      redis: `redis://:\${CHAIN_REDIS_PASSWORD}@127.0.0.1:${redis.port}/0`,
      allow_private_upstreams: true,
      runtime: {
        fresh_ttl_ms: FRESH_TTL_MS,
        max_age_ms: 600000,
        // No maintenance pass after the first (which seeds the shared connections): every
        // listing in this test is caused by what the test does.
        maintenance_interval_ms: 600000,
        list_timeout_ms: 15000,
        lease_ms: 30000,
      },
      caller_token_keys: { [KID]: { env: 'CHAIN_TOKEN_KEY' } },
      members: ['alice', 'bob', 'carol'],
      // alice may toggle shared connections' capabilities (for everyone); carol may not.
      operators: ['alice'],
      grants: Object.fromEntries(Object.entries(GRANTS).filter(([, g]) => g.length)),
      connections: {
        perm: {
          credential_mode: 'per_member',
          auth: 'bearer',
          credentials: {
            alice: { env: 'CHAIN_PERM_ALICE' },
            bob: { file: path.join(tmp, 'perm-bob.token') },
          },
        },
      },
    },
  };
}

async function main() {
  const agentBinary = agentBinaryOrSkip();
  tmp = mkdtempSync(path.join(os.tmpdir(), 'quiver-chain-'));
  statsFile = path.join(tmp, 'counted-stats.json');
  controlFile = path.join(tmp, 'counted-control.jsonl');
  writeFileSync(controlFile, '');
  // Credentials that are not the members' names: the upstream names tools after the member, and
  // the agent hides every quote of a credential from what it stores.
  writeFileSync(path.join(tmp, 'perm-bob.token'), 'bob.chain-credential-b2\n', { mode: 0o600 });
  const started = Date.now();
  let failed = 0;
  try {
    ({ redis, db } = await startEdgeRedis(NS, EDGE_REDIS_PASSWORD, { password: REDIS_PASSWORD }));
    permUpstream = await HttpUpstream.start(['--per-auth', '--auth-users', 'alice,bob'], { logs });
    agent = await Agent.start({
      binary: agentBinary, config: agentConfig(), logs,
      env: { CHAIN_REDIS_PASSWORD: REDIS_PASSWORD, CHAIN_TOKEN_KEY: SECRET,
             CHAIN_PERM_ALICE: 'alice.chain-credential-a1' } });
    for (const m of ['alice', 'bob', 'carol']) tokens[m] = agent.token(m);
    // Not a member of the configuration: a valid token (the shared key) and no grant.
    tokens.dave = mintToken({ member: 'dave', kid: KID, secret: SECRET });
    const env = edgeEnv({
      ns: NS, kid: KID, secret: SECRET, redisPort: redis.port,
      edgeRedisPassword: EDGE_REDIS_PASSWORD, l1TtlMs: L1_TTL_MS,
      webhookSecrets: { deploys: WEBHOOK_SECRET },
      extra: { QUIVER_FRESH_TTL_MS: String(FRESH_TTL_MS), QUIVER_MAX_AGE_MS: '600000',
               QUIVER_REVALIDATE_WINDOW_MS: String(EDGE_WINDOW_MS) } });
    edges.push(...await startEdges(2, { edgeDir, env, logs }));
    await deadline('the agent lists counted', async () => counted()?.tools_list_calls >= 1);

    failed += await runTests(tests, only);
  } finally {
    db?.close();
    for (const w of edges) await w.stop();
    await agent?.stop();
    await permUpstream?.stop();
    await redis?.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
  finish({ failed, count: tests.length, started, logs,
           secrets: [SECRET, REDIS_PASSWORD, EDGE_REDIS_PASSWORD, WEBHOOK_SECRET] });
}

main().catch(crashed(logs));
