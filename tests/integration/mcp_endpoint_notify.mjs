#!/usr/bin/env node
// The agent's /mcp change notifications (native-agent/api/mcp_notifier.h) reaching the official
// SDK clients: 1.x on the 2025-era GET stream, 2.x on a 2026-07-28 `subscriptions/listen` stream.
// `quiver-agent serve` (embedded SQLite) holds two real HTTP upstreams (tests/peers/
// test-upstream.mjs): `shop`, granted to alice, and `desk`, granted to bob. A tool added upstream
// reaches the agent as the upstream's own list_changed, the agent relists and commits (the
// store's epoch moves) and the caller's merged list changes:
//   1. a tool added to desk notifies bob and never alice (desk is not granted to her);
//   2. a tool added to shop notifies alice on both streams, and her next tools/list has it;
//   3. alice hiding a tool of shop (a preference) notifies her again;
// and when the agent stops, every stream ends cleanly (2.x: the graceful listen result), after
// which the counts are exact: what the agent queued before its end has all arrived. Also: the
// MCP Inspector's CLI lists the tools through /mcp, and the /mcp body bound.
//
// With `--store redis-v2` the same runs on a real redis-server in key layout v2 (the agent started
// in v1, then `quiver-agent migrate-layout v2` while it serves, as an operator moves it; the
// engine reloaded into v2 keeps both upstream sessions, so their list_changed reach it with no
// listing and no new session): there is no epoch, and the notifier asks each member's versions
// at every poll instead
// (Store::discovery_unchanged); the test also checks that an idle stream costs those versions
// and no discovery read (/metrics quiver_mcp_notify_*).
//
//   node tests/integration/mcp_endpoint_notify.mjs --agent QUIVER_AGENT [--store redis-v2]
import { execFile, execFileSync } from 'node:child_process';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { Agent, HttpUpstream, agentBinaryOrSkip, nodeModules } from '../edge/agent.mjs';
import {
  RedisServer, argValue, crashed, finish, runTests, sleep, waitFor, waitForFresh,
} from '../edge/harness.mjs';

const binary = agentBinaryOrSkip();
const nm = nodeModules();
const mod = (p) => import(pathToFileURL(path.join(nm, p)).href);
const sdk1 = await mod('@modelcontextprotocol/sdk/dist/esm/client/index.js');
const sdk1Http = await mod('@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js');
const sdk1Types = await mod('@modelcontextprotocol/sdk/dist/esm/types.js');
const sdk2 = await mod('@modelcontextprotocol/client/dist/index.mjs');

const KEY = 'mcp-notify-test-key-0123456789abcdef01';
const STORE = argValue('--store', 'sqlite');
const REDIS_PASSWORD = 'mcp-notify-redis-password';
let redis;  // --store redis-v2
const logs = [];
let agent;
const upstreams = {};
const tokens = {};
const KINDS = ['tools', 'resources', 'prompts'];

const url = () => new URL(`http://127.0.0.1:${agent.port}/mcp`);
const auth = (member) => ({ headers: { Authorization: `Bearer ${tokens[member]}` } });

// A fetch that reports the GET stream's answer and its end (the body is teed, not consumed).
function watchingFetch(watch) {
  return async (input, init) => {
    const res = await fetch(input, init);
    if ((init?.method ?? 'GET') !== 'GET') return res;
    watch.status = res.status;
    watch.contentType = res.headers.get('content-type');
    if (!res.ok || !res.body) {
      watch.opened(res.status);
      return res;
    }
    const [mine, theirs] = res.body.tee();
    (async () => {
      const reader = mine.getReader();
      try {
        while (!(await reader.read()).done) { /* the client reads its copy */ }
      } catch { /* a cut stream ends too */ }
      watch.ended(true);
    })();
    watch.opened(res.status);
    return new Response(theirs, { status: res.status, headers: res.headers });
  };
}

// A 1.x client whose GET stream is open, counting each list_changed it receives.
async function listen1(member) {
  const seen = [];
  const watch = {};
  const opened = new Promise((resolve) => { watch.opened = resolve; });
  watch.end = new Promise((resolve) => { watch.ended = resolve; });
  const client = new sdk1.Client({ name: 'sdk1', version: '1.0.0' });
  client.setNotificationHandler(sdk1Types.ToolListChangedNotificationSchema,
                                () => seen.push('tools'));
  client.setNotificationHandler(sdk1Types.ResourceListChangedNotificationSchema,
                                () => seen.push('resources'));
  client.setNotificationHandler(sdk1Types.PromptListChangedNotificationSchema,
                                () => seen.push('prompts'));
  client.onerror = () => {};  // the reconnection attempts after the agent stopped
  const transport = new sdk1Http.StreamableHTTPClientTransport(url(), {
    requestInit: auth(member), fetch: watchingFetch(watch),
    reconnectionOptions: { maxReconnectionDelay: 1000, initialReconnectionDelay: 1000,
                           reconnectionDelayGrowFactor: 1, maxRetries: 0 } });
  await client.connect(transport);
  const status = await opened;
  if (status !== 200 || !/^text\/event-stream/.test(watch.contentType ?? '')) {
    throw new Error(`${member}'s GET stream: ${status} ${watch.contentType}`);
  }
  const caps = client.getServerCapabilities();
  for (const k of KINDS) {
    if (caps?.[k]?.listChanged !== true) throw new Error(`capabilities.${k}: ${JSON.stringify(caps)}`);
  }
  return { client, seen, ended: watch.end };
}

// A 2.x client (2026-07-28) with an acknowledged subscriptions/listen stream.
async function listen2(member) {
  const seen = [];
  const client = new sdk2.Client({ name: 'sdk2', version: '1.0.0' },
                                 { versionNegotiation: { mode: 'auto' } });
  for (const k of KINDS) {
    client.setNotificationHandler(`notifications/${k}/list_changed`, () => seen.push(k));
  }
  const transport = new sdk2.StreamableHTTPClientTransport(url(), { requestInit: auth(member) });
  await client.connect(transport);
  if (client.getNegotiatedProtocolVersion() !== '2026-07-28') {
    throw new Error(`negotiated ${client.getNegotiatedProtocolVersion()}`);
  }
  const sub = await client.listen({ toolsListChanged: true, resourcesListChanged: true,
                                    promptsListChanged: true, resourceSubscriptions: ['x://y'] });
  const honored = sub.honoredFilter;
  if (!honored.toolsListChanged || !honored.resourcesListChanged || !honored.promptsListChanged ||
      honored.resourceSubscriptions) {
    throw new Error(`honoured filter: ${JSON.stringify(honored)}`);
  }
  return { client, seen, sub };
}

async function control(name, command) {
  const res = await fetch(upstreams[name].control, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(command) });
  if (res.status !== 200) throw new Error(`control ${name}: ${res.status} ${await res.text()}`);
}

async function toolNames(client) {
  const names = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    names.push(...page.tools.map((t) => t.name));
    cursor = page.nextCursor;
  } while (cursor);
  return names;
}

async function postMcp(member, body) {
  return agent.request('POST', '/mcp', {
    headers: { authorization: `Bearer ${tokens[member]}`, 'content-type': 'application/json',
               accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' },
    body });
}

// @modelcontextprotocol/inspector-cli (the MCP Inspector's CLI) as a child process. Its working
// directory is its own build/: it looks for its package.json relative to the working directory
// (`../package.json`) before importing it relative to itself.
function inspector(args) {
  const build = path.join(nm, '@modelcontextprotocol', 'inspector-cli', 'build');
  return new Promise((resolve) => {
    execFile(process.execPath, [path.join(build, 'index.js'), ...args],
             { cwd: build, timeout: 60000, maxBuffer: 16 << 20 },
             (error, stdout, stderr) => resolve({ code: error ? error.code ?? 1 : 0, stdout, stderr }));
  });
}

const tests = [
  {
    name: 'the MCP Inspector CLI lists the tools through /mcp, exactly what tools/list serves',
    fn: async () => {
      const { code, stdout, stderr } = await inspector([
        `http://127.0.0.1:${agent.port}/mcp`, '--transport', 'http', '--method', 'tools/list',
        '--header', `Authorization: Bearer ${tokens.alice}`]);
      if (code !== 0) throw new Error(`inspector-cli exited ${code}: ${stderr}`);
      const listed = JSON.parse(stdout).tools.map((t) => t.name);
      const alice = await listen1('alice');
      try {
        const want = await toolNames(alice.client);
        if (JSON.stringify(listed) !== JSON.stringify(want) || !listed.includes('shop__tool_1')) {
          throw new Error(`inspector listed ${JSON.stringify(listed)}, want ${JSON.stringify(want)}`);
        }
      } finally {
        await alice.client.close();
      }
      // Without the token: refused, never an empty list.
      const refused = await inspector([`http://127.0.0.1:${agent.port}/mcp`, '--transport', 'http',
                                       '--method', 'tools/list']);
      if (refused.code === 0) throw new Error(`listed without a token: ${refused.stdout}`);
    },
  },
  {
    name: 'the /mcp body bound: a call with ~1 MiB of arguments goes through; over it, 413 with ' +
          'a JSON-RPC error; other endpoints keep their 64 KiB',
    fn: async () => {
      const call = (size) => JSON.stringify({
        jsonrpc: '2.0', id: 1, method: 'tools/call',
        params: { name: 'shop__tool_1', arguments: { pad: 'x'.repeat(size) } } });
      const big = await postMcp('alice', call(1000 * 1024));
      if (big.status !== 200 || !big.json?.result || big.json.result.isError) {
        throw new Error(`a ~1 MiB call: ${big.status} ${big.text.slice(0, 300)}`);
      }
      const over = await postMcp('alice', call(1024 * 1024 + 20 * 1024));
      if (over.status !== 413 || over.json?.error?.code !== -32600 ||
          !/over \d+ bytes/.test(over.json.error.message)) {
        throw new Error(`over the bound: ${over.status} ${over.text.slice(0, 300)}`);
      }
      const prefs = await agent.request('PATCH', '/v1/mcp-connections/shop/preferences', {
        headers: { authorization: `Bearer ${tokens.alice}`, 'content-type': 'application/json' },
        body: JSON.stringify({ type: 'tool', key: 'tool_1', enabled: true, pad: 'x'.repeat(70000) }),
      });
      if (prefs.status !== 413) throw new Error(`a 70 KB preferences body: ${prefs.status}`);
    },
  },
  {
    name: 'list_changed per member, on both eras, ended cleanly at shutdown',
    fn: async () => {
      const alice1 = await listen1('alice');
      const alice2 = await listen2('alice');
      const bob1 = await listen1('bob');

      // 1. desk (bob's only) changes: bob hears of it, alice must not.
      await control('desk', { add_tool: 'desk_new', description: 'a tool added to desk' });
      await waitFor('bob notified of desk', async () => bob1.seen.includes('tools'), 20000);
      if (!(await toolNames(bob1.client)).includes('desk__desk_new')) {
        throw new Error('bob was notified, but his list has no desk__desk_new');
      }

      // 2. shop (alice's) changes: both of alice's streams hear of it. Her streams carry every
      // notification in order, so one wrongly sent for step 1 would have arrived before this one.
      await control('shop', { add_tool: 'shop_new', description: 'a tool added to shop' });
      await waitFor('alice notified of shop', async () =>
        alice1.seen.includes('tools') && alice2.seen.includes('tools'), 20000);
      for (const [who, c] of [['alice 1.x', alice1], ['alice 2.x', alice2]]) {
        if (c.seen.join() !== 'tools') throw new Error(`${who} saw ${c.seen.join()}`);
        if (!(await toolNames(c.client)).includes('shop__shop_new')) {
          throw new Error(`${who}: no shop__shop_new after the notification`);
        }
      }

      // 3. alice (an operator) hides a tool of shop: a preference change is a list change.
      const res = await agent.request('PATCH', '/v1/mcp-connections/shop/preferences', {
        headers: { authorization: `Bearer ${tokens.alice}`, 'content-type': 'application/json' },
        body: JSON.stringify({ type: 'tool', key: 'shop_new', enabled: false }) });
      if (res.status !== 200) throw new Error(`preferences: ${res.status} ${res.text}`);
      await waitFor('alice notified of her preference', async () =>
        alice1.seen.length >= 2 && alice2.seen.length >= 2, 20000);
      if ((await toolNames(alice2.client)).includes('shop__shop_new')) {
        throw new Error('the hidden tool is still listed');
      }

      // Idle streams on key layout v2: each poll asks the members' versions, nothing is read.
      if (STORE === 'redis-v2') {
        const before = await notifyCounts();
        await sleep(2000);  // about eight polls of 250 ms
        const after = await notifyCounts();
        if (after.unchanged - before.unchanged < 4 || after.digested - before.digested > 1) {
          throw new Error(`idle polls on v2: ${JSON.stringify({ before, after })}`);
        }
      }

      // Shutdown: each stream ends (2.x: gracefully, with the listen result); then the counts
      // are final.
      await agent.stop();
      agent = null;
      const how = await alice2.sub.closed;
      if (how !== 'graceful') throw new Error(`alice's 2.x subscription ended ${how}`);
      await alice1.ended;
      await bob1.ended;
      const want = { alice1: 'tools,tools', alice2: 'tools,tools', bob1: 'tools' };
      const got = { alice1: alice1.seen.join(), alice2: alice2.seen.join(), bob1: bob1.seen.join() };
      if (JSON.stringify(got) !== JSON.stringify(want)) {
        throw new Error(`notifications: ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
      }
      for (const c of [alice1, alice2, bob1]) await c.client.close().catch(() => {});
    },
  },
];

// How many MCP sessions each upstream has created (its /control/stats).
async function upstreamSessions() {
  const out = {};
  for (const [name, u] of Object.entries(upstreams)) {
    const res = await fetch(`${u.control}/stats`);
    if (res.status !== 200) throw new Error(`stats of ${name}: ${res.status}`);
    out[name] = (await res.json()).sessions.created;
  }
  return out;
}

// The notifier's counters on /metrics.
async function notifyCounts() {
  const m = await agent.metrics();
  return { digested: m.quiver_mcp_notify_digested_total,
           unchanged: m.quiver_mcp_notify_unchanged_total };
}

async function main() {
  const started = Date.now();
  let failed = 0;
  try {
    upstreams.shop = await HttpUpstream.start([], { logs });
    upstreams.desk = await HttpUpstream.start([], { logs });
    const v2 = STORE === 'redis-v2';
    if (v2) redis = await RedisServer.start({ password: REDIS_PASSWORD });
    agent = await Agent.start({
      binary, logs,
      env: { MCP_TEST_KEY: KEY, ...(v2 ? { NOTIFY_REDIS_PASSWORD: REDIS_PASSWORD } : {}) },
      config: {
        mcpServers: { shop: { url: upstreams.shop.url }, desk: { url: upstreams.desk.url } },
        quiver: {
          caller_token_keys: { k1: { env: 'MCP_TEST_KEY' } },
          members: ['alice', 'bob'],
          operators: ['alice'],
          grants: { alice: ['shop'], bob: ['desk'] },
          allow_private_upstreams: true,
          ...(v2 ? { redis: `redis://:\${NOTIFY_REDIS_PASSWORD}@127.0.0.1:${redis.port}`,
                     runtime: { store_check_interval_ms: 200 } } : {}),
        },
      },
    });
    tokens.alice = agent.token('alice');
    tokens.bob = agent.token('bob');
    for (const m of ['alice', 'bob']) await waitForFresh(agent, tokens[m], 1);
    if (v2) {
      const sessionsBefore = await upstreamSessions();
      const out = execFileSync(binary, ['migrate-layout', 'v2', '--settle', '1s', '--config',
                                        agent.configFile],
                               { env: { ...agent.env }, encoding: 'utf8' });
      if (!out.includes('v2:ready:')) throw new Error(`migrate-layout: ${out}`);
      await waitFor('the agent reloaded into key layout v2',
                    async () => logs.some((l) => l.includes('reloaded')), 30000);
      // The reloaded engine adopts the sessions of the one before (Agent::stop_handing_over):
      // both upstreams' list_changed keep reaching it, nothing listed by hand, no session opened.
      if (!logs.some((l) => l.includes('kept 2 upstream session(s) of the engine before the ' +
                                        'reload'))) {
        throw new Error('the reloaded engine did not keep both upstream sessions');
      }
      const sessionsAfter = await upstreamSessions();
      if (JSON.stringify(sessionsAfter) !== JSON.stringify(sessionsBefore)) {
        throw new Error(`upstream sessions created across the migration: ` +
                        `${JSON.stringify(sessionsBefore)} → ${JSON.stringify(sessionsAfter)}`);
      }
    }
    failed += await runTests(tests, argValue('--only', ''));
  } finally {
    await agent?.stop();
    for (const u of Object.values(upstreams)) await u.stop();
    await redis?.stop();
  }
  finish({ failed, count: tests.length, started, logs, secrets: [KEY, REDIS_PASSWORD] });
}

main().catch(crashed(logs));
