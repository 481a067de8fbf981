// Issue 12 through the edge: a member connects their account with the callback delivered to the
// EDGE's `GET /v1/oauth/callback` (the public face), which queues (state, code, iss) in Redis
// (`quiver:{ns}:oauth-callbacks`, schema/redis-keys.md) for the agent; the agent exchanges the code and lists
// the member's manifest, which the edge then serves.
//
//   real oidc-provider + the SDK's server behind bearer auth (tests/fixtures/oauth/)
//   → quiver-agent serve (Redis, quiver.oauth.redirect_uri = the edge's callback)
//   → redis-server → quiver-edge in workerd → HTTP client playing the member's browser
//
//   node tests/edge/oauth.mjs [--edge-dir build/wasm/edge] [--agent .../quiver-agent] [--only s]
//
// Registered as the ctest `wasm.edge_oauth` (tests/CMakeLists.txt). 0 when every test passed, 77
// when the native agent is not built.
import assert from 'node:assert/strict';
import path from 'node:path';
import readline from 'node:readline';

import { authorizeInBrowser } from '../fixtures/oauth/browser.mjs';
import { Agent, agentBinaryOrSkip, nodeModules } from './agent.mjs';
import {
  argValue, crashed, edgeDirArg, edgeEnv, finish, repoRoot, runTests, sleep,
  spawnTied, startEdgeRedis, startEdges, stopTied,
} from './harness.mjs';

const edgeDir = edgeDirArg();
const only = argValue('--only', '');

const NS = 'oauth';
const KID = 'oauth-1';
const SECRET = 'oauth-edge-caller-token-secret-0123456789ab';
const REDIS_PASSWORD = 'oauth-redis-password';
const EDGE_REDIS_PASSWORD = 'oauth-edge-redis-password';
const OAUTH_KEY = 'ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100';

const logs = [];
const fixtures = [];
let redis;
let db;
let agent;
let edge;
let as;
let mcp;
const tokens = {};

// A fixture of tests/fixtures/oauth/ under Node 22, tied to this process; its ready line.
async function startFixture(script, args) {
  const node = path.join(nodeModules(), 'node', 'bin', 'node');
  const proc = spawnTied(node, [path.join(repoRoot, 'tests', 'fixtures', 'oauth', script), ...args],
                         { env: { ...process.env, QUIVER_NODE_MODULES: nodeModules() } });
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  fixtures.push({ proc, exited });
  readline.createInterface({ input: proc.stderr }).on('line', (l) => logs.push(l));
  const line = await new Promise((resolve, reject) => {
    readline.createInterface({ input: proc.stdout }).once('line', resolve);
    proc.once('exit', (code) => reject(new Error(`${script} exited ${code}`)));
  });
  return JSON.parse(line);
}

async function deadline(what, probe, timeoutMs = 20000, everyMs = 100) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    last = await probe();
    if (last?.ok) return last.value;
    await sleep(everyMs);
  }
  throw new Error(`${what}: not within ${timeoutMs} ms (last: ${JSON.stringify(last?.value)})`);
}

const auth = (member) => ({ authorization: `Bearer ${tokens[member]}` });
const entryOf = (res) => res.json?.connections?.[0] ?? res.json;
const toolNames = (entry) => (entry?.manifest?.tools?.items ?? []).map((t) => t.name).sort();
const toolsOf = (m) => [1, 2, 3].map((i) => `${m}_tool_${i}`);
const needsAuthorization = (e) =>
  e?.status === 'authorization_required' || e?.error?.code === 'AUTHORIZATION_REQUIRED';
const edgeEntry = async (member) =>
  entryOf(await edge.request('GET', '/v1/mcp-connections/linear/manifest', { headers: auth(member) }));

// Every value Redis holds, as one string (for the secret scan).
async function redisEverything() {
  let all = '';
  let cursor = '0';
  do {
    const [next, keys] = await db.call('SCAN', cursor, 'COUNT', '1000');
    cursor = next;
    for (const key of keys) {
      all += `${key}\n`;
      const type = await db.call('TYPE', key);
      const read = { string: ['GET'], hash: ['HGETALL'], set: ['SMEMBERS'], stream: ['XRANGE', '-', '+'],
                     list: ['LRANGE', '0', '-1'], zset: ['ZRANGE', '0', '-1'] }[type];
      if (!read) continue;
      const [cmd, ...rest] = read;
      all += `${JSON.stringify(await db.call(cmd, key, ...rest))}\n`;
    }
  } while (cursor !== '0');
  return all;
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

test('before connecting, the edge says authorization_required', async () => {
  for (const m of ['alice', 'bob']) {
    const e = await deadline(`${m} needs authorization`, async () => {
      const v = await edgeEntry(m);
      return { ok: needsAuthorization(v), value: v };
    });
    assert.equal(e.status, 'authorization_required', JSON.stringify(e));
    assert.deepEqual(toolNames(e), []);
  }
});

const codes = [];
test('a callback delivered to the edge reaches the agent and the member is listed', async () => {
  const callback = `http://127.0.0.1:${edge.port}/v1/oauth/callback`;
  for (const m of ['alice', 'bob']) {
    const begun = await agent.request('POST', '/v1/mcp-connections/linear/authorize',
                                      { headers: { ...auth(m), 'content-type': 'application/json' },
                                        body: '{}' });
    assert.equal(begun.status, 200, begun.text);
    const url = begun.json.authorization_url ?? begun.json.url;
    const back = await authorizeInBrowser(url, { user: m, callbackPrefix: callback });
    codes.push(new URL(back).searchParams.get('code'));
    // The edge queues the callback and says it was received (or, once an agent reported, the
    // outcome); a reload of the page shows the agent's outcome without queueing it again.
    const pathAndQuery = back.slice(`http://127.0.0.1:${edge.port}`.length);
    const page = await edge.request('GET', pathAndQuery);
    assert.equal(page.status, 200, page.text);
    assert.ok(!page.text.includes(codes.at(-1)), 'the page shows the code');
    const e = await deadline(`${m}'s tools at the edge`, async () => {
      const v = await edgeEntry(m);
      return { ok: toolNames(v).join() === toolsOf(m).join(), value: v };
    });
    assert.ok(['fresh', 'stale'].includes(e.status), JSON.stringify(e));
    const reload = await deadline('the page says connected', async () => {
      const r = await edge.request('GET', pathAndQuery);
      return { ok: /connected/i.test(r.text), value: r };
    });
    assert.equal(reload.status, 200, reload.text);
  }
  // Each only their own.
  for (const [m, other] of [['alice', 'bob'], ['bob', 'alice']]) {
    const res = await edge.request('GET', '/v1/manifests', { headers: auth(m) });
    assert.equal(res.status, 200);
    assert.ok(!res.text.includes(`${other}_tool`), res.text);
  }
});

// The access tokens are JWTs (eyJ...): none may be in Redis (the callback queue holds only the
// short-lived code).
test('Redis holds no token', async () => {
  const all = await redisEverything();
  assert.ok(!/eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\./.test(all), 'a JWT in Redis');
});

test('a forged state at the edge stores nothing and is answered', async () => {
  const res = await edge.request('GET', `/v1/oauth/callback?state=forged&code=abc&iss=${encodeURIComponent(as.issuer)}`);
  assert.ok(res.status < 500, `${res.status} ${res.text}`);
  await sleep(1000);
  const e = await edgeEntry('alice');
  assert.ok(!needsAuthorization(e), JSON.stringify(e));
});

async function main() {
  const agentBinary = agentBinaryOrSkip();
  const started = Date.now();
  let failed = 0;
  try {
    ({ redis, db } = await startEdgeRedis(NS, EDGE_REDIS_PASSWORD, { password: REDIS_PASSWORD }));
    as = await startFixture('auth_server.mjs', ['--access-ttl', '300']);
    mcp = await startFixture('protected_mcp_server.mjs', ['--issuer', as.issuer]);
    const env = edgeEnv({ ns: NS, kid: KID, secret: SECRET, redisPort: redis.port,
                          edgeRedisPassword: EDGE_REDIS_PASSWORD, l1TtlMs: 200 });
    [edge] = await startEdges(1, { edgeDir, env, logs });
    agent = await Agent.start({
      binary: agentBinary, logs,
      env: { OAUTH_REDIS_PASSWORD: REDIS_PASSWORD, OAUTH_TOKEN_KEY: SECRET, OAUTH_KEY },
      config: {
        mcpServers: { linear: { url: mcp.url } },
        quiver: {
          namespace: NS,
          redis: `redis://:\${OAUTH_REDIS_PASSWORD}@127.0.0.1:${redis.port}/0`,
          allow_private_upstreams: true,
          caller_token_keys: { [KID]: { env: 'OAUTH_TOKEN_KEY' } },
          members: ['alice', 'bob'],
          grants: { '*': ['*'] },
          connections: { linear: { credential_mode: 'per_member', auth: 'oauth' } },
          oauth: { key: { env: 'OAUTH_KEY' },
                   redirect_uri: `http://127.0.0.1:${edge.port}/v1/oauth/callback` },
          runtime: { list_timeout_ms: 15000 },
        },
      },
    });
    for (const m of ['alice', 'bob']) tokens[m] = agent.token(m);
    failed += await runTests(tests, only);
  } finally {
    db?.close();
    await edge?.stop();
    await agent?.stop();
    for (const f of fixtures) await stopTied(f.proc, f.exited);
    await redis?.stop();
  }
  finish({ failed, count: tests.length, started, logs, secrets: [SECRET, OAUTH_KEY, ...codes] });
}

main().catch(crashed(logs));
