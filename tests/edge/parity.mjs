// The two hosts give the same answer to the same request: one matrix of requests sent to the
// native agent on SQLite and to the edge in real workerd on a real redis-server, holding the
// same data, with status and error code compared row by row.
//
//   node tests/edge/parity.mjs [--edge-dir build/wasm/edge] [--agent build/native/.../quiver-agent]
//                              [--only substring]
//
// Registered as the ctest `wasm.edge_parity` (wasm-worker/CMakeLists.txt). Exit status 0 when
// every row agrees (and says what it should), 77 (ctest SKIP_RETURN_CODE) when the native
// quiver-agent is not built.
//
// The data: one shared connection `docs` and one per_member connection `team`
// (tests/peers/test-upstream.mjs over stdio, listed by the agent; written into Redis for the edge
// in the agent's key layout — records, grants, the grantees set the agent publishes — with the
// manifests the agent listed). alice is granted both, bob `team` only; dave holds a valid token and
// no grant. The same token key, namespace and webhook secret at both hosts. Each row is a request
// with an expected status and error code: both hosts must answer exactly that (so a row where
// they agree on a wrong answer fails too); a row with `refreshes` must also have exactly that
// 202 body at both (the webhook's per-target results). Requests that change state (webhooks)
// are made once per host, each signed for its host.
import { existsSync } from 'node:fs';
import path from 'node:path';

import { Agent, defaultAgentBinary, nodeModules, testUpstreamScript } from './agent.mjs';
import {
  EDGE_REDIS_USER, Layout, Workerd, argValue, connectionCommands, edgeDirArg, loggedProblems,
  manifestCommands, manifestJson, mintToken, signWebhook, startEdgeRedis, waitFor,
} from './harness.mjs';

const edgeDir = edgeDirArg();
const agentBinary = path.resolve(argValue('--agent', defaultAgentBinary()));
const only = argValue('--only', '');
const SKIP = 77;

const NS = 'parity';
const KID = 'parity-1';
const SECRET = 'parity-caller-token-secret-0123456789abcdef';
const EDGE_REDIS_PASSWORD = 'parity-edge-redis-password';
const WEBHOOK_SECRET = 'parity-webhook-secret-0123456789abcdef';
const TEAM_KEYS = { alice: 'parity-team-key-of-alice', bob: 'parity-team-key-of-bob' };
const layout = new Layout(NS);

const tokenOf = (member, opts = {}) => mintToken({ member, kid: KID, secret: SECRET, ...opts });
const bearer = (member, opts) => `Bearer ${tokenOf(member, opts)}`;
const alice = () => ({ authorization: bearer('alice') });

// Equal as JSON values (objects compared whatever the order of their keys).
const sorted = (v) => (Array.isArray(v) ? v.map(sorted) : v && typeof v === 'object'
  ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])])) : v);
const sameJson = (a, b) => JSON.stringify(sorted(a)) === JSON.stringify(sorted(b));

// One row: a request and what both hosts must answer ([status] or [status, error code]).
// `headers` may be a function (fresh tokens); `body` a function of the host's name (a webhook
// applied at one host must not be a replay at the other); `sign` signs the body for the webhook
// secret (namespace `signNs`, at `signAt()`); `repeat` sends it that many times, the last answer
// compared; `check` looks at a 2xx body; `refreshes` is a webhook's whole list of results, the
// same at both hosts. A result's status ADMITTED stands for `queued` or `already_queued`: whether
// a target's revalidation gate is still taken depends on what each host did before (the agent's
// own first reads and listings take gates; the edge's Redis is seeded without them), so where a
// row's earlier history differs between the hosts, it says only that the request was admitted.
function row(name, method, target, expect, { headers = {}, body, repeat = 1, check, sign = false,
                                            signNs = NS, signAt = () => Date.now(),
                                            refreshes } = {}) {
  if (refreshes) {
    check = (r) => {
      const got = r.json?.refreshes;
      if (!Array.isArray(got) || got.length !== refreshes.length) return false;
      return refreshes.every((want, i) => {
        const admitted = ['queued', 'already_queued'].includes(got[i]?.status);
        const status = want.status === ADMITTED && admitted ? ADMITTED : got[i]?.status;
        return sameJson({ ...got[i], status }, want);
      });
    };
  }
  return { name, method, target, expect, headers, body, repeat, check, sign, signNs, signAt };
}

const ADMITTED = 'queued or already_queued';
const goodWebhook = (tag) => JSON.stringify({ connection_id: 'docs', reason: `parity-${tag}` });
const refreshed = (cid, principal, status, marked) => ({
  connection_id: cid, ...(principal ? { principal } : {}), status, marked_stale: marked });

const ROWS = [
  // Authentication (the core's authenticate_caller at both).
  row('no token', 'GET', '/v1/manifests', [401, 'UNAUTHENTICATED']),
  row('not a bearer scheme', 'GET', '/v1/manifests', [401, 'UNAUTHENTICATED'],
      { headers: { authorization: 'Basic YWxpY2U6eA==' } }),
  row('empty bearer', 'GET', '/v1/manifests', [401, 'UNAUTHENTICATED'],
      { headers: { authorization: 'Bearer ' } }),
  row('bad signature', 'GET', '/v1/manifests', [401, 'UNAUTHENTICATED'],
      { headers: () => ({ authorization: `${bearer('alice')}x` }) }),
  row('expired token', 'GET', '/v1/manifests', [401, 'UNAUTHENTICATED'],
      { headers: () => ({ authorization: bearer('alice', { nowMs: Date.now() - 7200_000 }) }) }),
  row('unknown key id', 'GET', '/v1/manifests', [401, 'UNAUTHENTICATED'],
      { headers: () => ({ authorization: `Bearer ${mintToken({ member: 'alice', kid: 'other',
                                                                secret: SECRET })}` }) }),
  row('wrong audience', 'GET', '/v1/manifests', [401, 'UNAUTHENTICATED'],
      { headers: () => ({ authorization: bearer('alice', { aud: 'elsewhere' }) }) }),
  row('alg none', 'GET', '/v1/manifests', [401, 'UNAUTHENTICATED'],
      { headers: () => ({ authorization: bearer('alice', { alg: 'none' }) }) }),
  row('two Authorization headers', 'GET', '/v1/manifests', [401, 'UNAUTHENTICATED'],
      { headers: () => ({ authorization: [bearer('alice'), bearer('alice')] }) }),
  row('a principal in the query', 'GET', '/v1/manifests?principal=shared', [400, 'BAD_REQUEST'],
      { headers: alice }),
  row('unauthenticated with a bad query', 'GET', '/v1/manifests?x=1', [401, 'UNAUTHENTICATED']),

  // Good requests.
  row('manifests', 'GET', '/v1/manifests', [200], { headers: alice,
    check: (r) => r.json?.connections?.map((c) => c.id).join(',') === 'docs,team' }),
  row('manifests, mcp view and a limit', 'GET', '/v1/manifests?view=mcp&limit=5', [200],
      { headers: alice }),
  row('HEAD manifests', 'HEAD', '/v1/manifests', [200], { headers: alice }),
  row('one manifest', 'GET', '/v1/mcp-connections/docs/manifest', [200], { headers: alice }),
  row('an id percent-encoded', 'GET', '/v1/mcp-connections/d%6Fcs/manifest', [200],
      { headers: alice }),
  row('search', 'GET', '/v1/search?q=tool&limit=3', [200], { headers: alice }),
  row('a member without grants', 'GET', '/v1/manifests', [200],
      { headers: () => ({ authorization: bearer('dave') }),
        check: (r) => Array.isArray(r.json?.connections) && r.json.connections.length === 0 }),
  row('not granted', 'GET', '/v1/mcp-connections/docs/manifest', [404, 'NOT_FOUND'],
      { headers: () => ({ authorization: bearer('dave') }) }),
  row('no such connection', 'GET', '/v1/mcp-connections/nope/manifest', [404, 'NOT_FOUND'],
      { headers: alice }),

  // Odd paths.
  row('double slash', 'GET', '//v1/manifests', [404, 'NOT_FOUND'], { headers: alice }),
  row('trailing slash', 'GET', '/v1/manifests/', [404, 'NOT_FOUND'], { headers: alice }),
  row('empty segment', 'GET', '/v1//manifests', [404, 'NOT_FOUND'], { headers: alice }),
  row('an encoded letter in the path', 'GET', '/v1/%6Danifests', [404, 'NOT_FOUND'],
      { headers: alice }),
  row('upper case', 'GET', '/v1/Manifests', [404, 'NOT_FOUND'], { headers: alice }),
  row('%2F in an id', 'GET', '/v1/mcp-connections/docs%2Fx/manifest', [404, 'NOT_FOUND'],
      { headers: alice }),
  row('%2F in an id, unauthenticated', 'GET', '/v1/mcp-connections/docs%2Fx/manifest',
      [401, 'UNAUTHENTICATED']),
  row('an id that cannot exist', 'GET', '/v1/mcp-connections/a%20b/manifest', [404, 'NOT_FOUND'],
      { headers: alice }),
  row('a slash-separated id', 'GET', '/v1/mcp-connections/docs/x/manifest', [404, 'NOT_FOUND'],
      { headers: alice }),
  row('no such endpoint', 'GET', '/v1/nope', [404, 'NOT_FOUND'], { headers: alice }),
  row('POST a read endpoint', 'POST', '/v1/manifests', [405, 'METHOD_NOT_ALLOWED'],
      { headers: alice }),
  row('GET refresh-tools', 'GET', '/v1/mcp-connections/docs/refresh-tools',
      [405, 'METHOD_NOT_ALLOWED'], { headers: alice }),
  row('DELETE search', 'DELETE', '/v1/search?q=x', [405, 'METHOD_NOT_ALLOWED'],
      { headers: alice }),

  // Queries.
  row('unknown parameter', 'GET', '/v1/manifests?x=1', [400, 'BAD_REQUEST'], { headers: alice }),
  row('duplicate parameter', 'GET', '/v1/manifests?view=mcp&view=mcp', [400, 'BAD_REQUEST'],
      { headers: alice }),
  row('bad view', 'GET', '/v1/mcp-connections/docs/manifest?view=all', [400, 'BAD_REQUEST'],
      { headers: alice }),
  row('limit 0', 'GET', '/v1/manifests?limit=0', [400, 'BAD_REQUEST'], { headers: alice }),
  row('limit not a number', 'GET', '/v1/manifests?limit=ten', [400, 'BAD_REQUEST'],
      { headers: alice }),
  row('limit negative', 'GET', '/v1/manifests?limit=-1', [400, 'BAD_REQUEST'], { headers: alice }),
  row('huge limit', 'GET', '/v1/manifests?limit=99999999999999999999', [400, 'BAD_REQUEST'],
      { headers: alice }),
  row('limit over the page size', 'GET', '/v1/manifests?limit=201', [400, 'BAD_REQUEST'],
      { headers: alice }),
  row('search limit over the bound', 'GET', '/v1/search?q=tool&limit=51', [400, 'BAD_REQUEST'],
      { headers: alice }),
  row('search without q', 'GET', '/v1/search', [400, 'BAD_REQUEST'], { headers: alice }),
  row('malformed percent-encoding', 'GET', '/v1/search?q=%zz', [400, 'BAD_REQUEST'],
      { headers: alice }),
  row('after not an id', 'GET', '/v1/manifests?after=a%20b', [400, 'BAD_REQUEST'],
      { headers: alice }),
  row('a parameter of refresh-tools', 'POST', '/v1/mcp-connections/docs/refresh-tools?x=1',
      [400, 'BAD_REQUEST'], { headers: alice }),

  // The webhook (the core's check_webhook at both; then each host's store step).
  row('webhook GET', 'GET', '/v1/webhooks/refresh', [405, 'METHOD_NOT_ALLOWED']),
  row('webhook unsigned', 'POST', '/v1/webhooks/refresh', [401, 'UNAUTHENTICATED'],
      { body: () => goodWebhook('unsigned') }),
  row('webhook bad signature', 'POST', '/v1/webhooks/refresh', [401, 'UNAUTHENTICATED'],
      { body: () => goodWebhook('bad'),
        headers: () => ({ 'x-quiver-signature': `t=${Math.floor(Date.now() / 1000)},v2=00` }) }),
  row('webhook signed for another namespace', 'POST', '/v1/webhooks/refresh',
      [401, 'UNAUTHENTICATED'], { body: () => goodWebhook('other-ns'), sign: true, signNs: 'other' }),
  row('webhook signed long ago', 'POST', '/v1/webhooks/refresh', [401, 'UNAUTHENTICATED'],
      { body: () => goodWebhook('old'), sign: true, signAt: () => Date.now() - 3600_000 }),
  row('webhook malformed JSON', 'POST', '/v1/webhooks/refresh', [400, 'BAD_REQUEST'],
      { body: () => '{"connection_id": ', sign: true }),
  row('webhook malformed JSON, replayed', 'POST', '/v1/webhooks/refresh', [400, 'BAD_REQUEST'],
      { body: () => '{"connections": 7}', sign: true, repeat: 2 }),
  row('webhook good', 'POST', '/v1/webhooks/refresh', [202],
      { body: (host) => goodWebhook(`good-${host}`), sign: true,
        check: (r) => r.json?.refreshes?.[0]?.connection_id === 'docs' }),
  row('webhook replayed', 'POST', '/v1/webhooks/refresh', [401, 'UNAUTHENTICATED'],
      { body: (host) => goodWebhook(`replayed-${host}`), sign: true, repeat: 2 }),
  row('webhook unknown connection', 'POST', '/v1/webhooks/refresh', [202],
      { body: (host) => JSON.stringify({ connection_id: 'nope', reason: `unknown-${host}` }),
        sign: true, refreshes: [refreshed('nope', undefined, 'unknown_connection', false)] }),
  // Who a target names comes from the store at both hosts (the connection record's mode, the
  // grantees the agent published), in one atomic step: a named grantee, then the connection as a
  // whole (marked once, no principal: its members are queued when they read), a member who is
  // not a grantee, `shared` on a per_member connection, a member on a shared one, an unknown
  // connection.
  row('webhook per_member targets', 'POST', '/v1/webhooks/refresh', [202],
      { body: (host) => JSON.stringify({
        connections: [{ connection_id: 'team', principal: 'member/bob' }, 'team',
                      { connection_id: 'team', principal: 'member/zed' },
                      { connection_id: 'team', principal: 'shared' },
                      { connection_id: 'docs', principal: 'member/alice' }, 'nope'],
        reason: `team-${host}` }),
        sign: true,
        refreshes: [refreshed('team', 'member/bob', ADMITTED, true),
                    refreshed('team', undefined, 'marked', true),
                    refreshed('team', 'member/zed', 'unknown_principal', false),
                    refreshed('team', 'shared', 'unknown_principal', false),
                    refreshed('docs', 'member/alice', 'unknown_principal', false),
                    refreshed('nope', undefined, 'unknown_connection', false)] }),
  row('webhook unknown principal', 'POST', '/v1/webhooks/refresh', [202],
      { body: (host) => JSON.stringify({ connection_id: 'team', principal: 'member/dave',
                                         reason: `stranger-${host}` }),
        sign: true, refreshes: [refreshed('team', 'member/dave', 'unknown_principal', false)] }),
];
async function send(host, hostName, r) {
  const body = typeof r.body === 'function' ? r.body(hostName) : r.body;
  const headers = { ...(typeof r.headers === 'function' ? r.headers() : r.headers) };
  if (r.sign) {
    headers['x-quiver-signature'] =
      signWebhook(WEBHOOK_SECRET, r.signNs, body, r.signAt());
  }
  if (body !== undefined) headers['content-type'] = 'application/json';
  let res;
  for (let i = 0; i < r.repeat; i++) res = await host.request(r.method, r.target, { headers, body });
  return res;
}

const answer = (res) => [res.status, res.json?.error?.code].filter((x) => x !== undefined);

function agentConfig() {
  const upstream = {
    command: process.execPath,
    args: [testUpstreamScript, 'stdio', '--tools', '2', '--quiet'],
    env: { QUIVER_NODE_MODULES: nodeModules() },
  };
  return {
    mcpServers: { docs: upstream, team: upstream },
    quiver: {
      namespace: NS,
      caller_token_keys: { [KID]: { env: 'PARITY_TOKEN_KEY' } },
      webhook_secrets: { deploys: { env: 'PARITY_WEBHOOK_SECRET' } },
      members: ['alice', 'bob'],
      grants: { alice: ['docs', 'team'], bob: ['team'] },
      connections: {
        team: {
          credential_mode: 'per_member', auth: 'api_key', credential_env: 'TEAM_KEY',
          credentials: { alice: { env: 'PARITY_TEAM_ALICE' }, bob: { env: 'PARITY_TEAM_BOB' } },
        },
      },
    },
  };
}

// The manifest the agent serves `member` for `cid`, once it has listed it.
async function listedBy(agent, cid, member, logs) {
  let listed;
  let last;
  const headers = { authorization: bearer(member) };
  await waitFor(`the agent lists ${cid} for ${member}`, async () => {
    last = await agent.request('GET', `/v1/mcp-connections/${cid}/manifest`, { headers });
    listed = (last.json?.connections?.[0] ?? last.json)?.manifest;
    return last.status === 200 && listed?.tools?.items?.length > 0;
  }, 30000).catch((e) => {
    throw new Error(`${e.message}: last ${last?.status} ${last?.text?.slice(0, 300)}\n` +
                    logs.slice(-20).join('\n'));
  });
  return manifestJson(listed.tools.items, listed.server?.name ?? cid);
}

async function main() {
  if (!existsSync(agentBinary)) {
    console.log(`SKIP: no quiver-agent at ${agentBinary} (build the native tree first)`);
    process.exit(SKIP);
  }
  const logs = [];
  let redis;
  let db;
  let agent;
  let edge;
  let failed = 0;
  const started = Date.now();
  try {
    agent = await Agent.start({
      binary: agentBinary, config: agentConfig(), logs,
      env: { PARITY_TOKEN_KEY: SECRET, PARITY_WEBHOOK_SECRET: WEBHOOK_SECRET,
             PARITY_TEAM_ALICE: TEAM_KEYS.alice, PARITY_TEAM_BOB: TEAM_KEYS.bob } });
    // The agent lists docs and team (for each grantee); what it listed is the edge's data too.
    const manifests = {
      docs: await listedBy(agent, 'docs', 'alice', logs),
      'team:member/alice': await listedBy(agent, 'team', 'alice', logs),
      'team:member/bob': await listedBy(agent, 'team', 'bob', logs),
    };

    ({ redis, db } = await startEdgeRedis(NS, EDGE_REDIS_PASSWORD));
    // The agent's key layout (store sync_grants: grants per member, grantees per connection).
    for (const cmd of [...connectionCommands(layout, 'docs', 'shared'),
                       ...connectionCommands(layout, 'team', 'per_member'),
                       ['SADD', layout.grants('alice'), 'docs', 'team'],
                       ['SADD', layout.grants('bob'), 'team'],
                       ['SADD', layout.grantees('docs'), 'member/alice'],
                       ['SADD', layout.grantees('team'), 'member/alice', 'member/bob'],
                       ...manifestCommands(layout, 'docs', 'shared', manifests.docs),
                       ...manifestCommands(layout, 'team', 'member/alice',
                                           manifests['team:member/alice']),
                       ...manifestCommands(layout, 'team', 'member/bob',
                                           manifests['team:member/bob'])]) {
      await db.call(...cmd);
    }
    edge = await Workerd.start({
      config: path.join(edgeDir, 'workerd.capnp'), logs,
      env: {
        QUIVER_TOKEN_KEYS: JSON.stringify({ [KID]: SECRET }),
        QUIVER_NAMESPACE: NS,
        QUIVER_WEBHOOK_SECRETS: JSON.stringify({ deploys: WEBHOOK_SECRET }),
        REDIS_HOST: '127.0.0.1',
        REDIS_PORT: String(redis.port),
        REDIS_USERNAME: EDGE_REDIS_USER,
        REDIS_PASSWORD: EDGE_REDIS_PASSWORD,
      } });

    const rows = ROWS.filter((r) => r.name.includes(only));
    for (const r of rows) {
      const a = await send(agent, 'agent', r);
      const e = await send(edge, 'edge', r);
      const want = JSON.stringify(r.expect);
      const got = { agent: JSON.stringify(answer(a)), edge: JSON.stringify(answer(e)) };
      const problems = [];
      for (const [host, res] of [['agent', a], ['edge', e]]) {
        if (got[host] !== want) problems.push(`${host} ${got[host]}`);
        else if (r.check && !r.check(res)) problems.push(`${host} body ${res.text.slice(0, 200)}`);
      }
      if (problems.length) {
        failed++;
        console.log(`FAIL ${r.name}: ${r.method} ${r.target}: want ${want}; ${problems.join('; ')}`);
      } else {
        console.log(`ok   ${r.name}: ${want}`);
      }
    }
    console.log(`${rows.length} rows`);
  } finally {
    db?.close();
    await edge?.stop();
    await agent?.stop();
    await redis?.stop();
  }
  failed += loggedProblems(logs, [SECRET, EDGE_REDIS_PASSWORD, WEBHOOK_SECRET,
                                  ...Object.values(TEAM_KEYS)]);
  console.log(`${failed ? 'FAILED' : 'passed'} in ${Date.now() - started} ms`);
  if (failed && process.env.QUIVER_EDGE_LOGS) console.log(logs.join('\n'));
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
