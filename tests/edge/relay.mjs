#!/usr/bin/env node
// The edge's call relay (shared/call_relay.h, shared/edge_service.h) end to end, with real parts:
// the native quiver-agent on a real redis-server consuming relayed calls, two controllable
// upstreams (tests/peers/test-upstream.mjs over stdio, each counting what reached it), and the
// staged quiver-edge in workerd answering POST /mcp. What a client of the edge would notice:
//   - a call is performed by the agent and its answer comes back through the edge;
//   - isolation: a member cannot call a connection not granted to them, and a tool disabled after
//     the edge's L1 copy was taken is refused by the agent's own check (never performed);
//   - an upstream hanging mid-call: the timeout error (the agent's deadline, well within the
//     edge's), and the upstream told to cancel;
//   - a client disconnecting mid-call: the edge stops waiting at once (its BLPOP connection is
//     closed, the request forgotten), long before the call's deadline;
//   - the agent down (no `call-agents`): AGENT_UNREACHABLE at once, while tools/list still answers
//     from the cache;
//   - Redis down: STORE_UNAVAILABLE, never a made-up result.
//
//   node tests/edge/relay.mjs --edge-dir build/wasm/edge --agent build/native/native-agent/quiver-agent
import net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Agent, agentBinaryOrSkip, nodeModules, testUpstreamScript, upstreamStats } from './agent.mjs';
import {
  EDGE_REDIS_USER, Redis, argValue, crashed, edgeDirArg, edgeEnv, finish, runTests, startEdgeRedis,
  startEdges, waitFor,
} from './harness.mjs';

const binary = agentBinaryOrSkip();
const edgeDir = edgeDirArg();
const NS = 'relaytest';
const KID = 'k1';
const KEY = 'relay-test-caller-token-key-0123456789';
const EDGE_REDIS_PASSWORD = 'relay-test-edge-redis-password';
const logs = [];
const tmp = mkdtempSync(path.join(os.tmpdir(), 'quiver-relay-'));
const stats = { t: path.join(tmp, 't.json'), slow: path.join(tmp, 'slow.json') };

let redis;
let db;
let agent;
let edge;      // L1 of 500 ms
let longEdge;  // L1 of 10 min: its copy of a grant or preference outlives a change
const tokens = {};

const upstream = (cid) => ({
  command: process.execPath,
  args: [testUpstreamScript, 'stdio', '--quiet', '--tools', '4', '--stats-file', stats[cid]],
  env: { QUIVER_NODE_MODULES: nodeModules() },
});

// One JSON-RPC request to `server`'s /mcp as `member` (2025-06-18, no session).
let nextId = 1;
async function rpc(server, member, method, params) {
  const id = nextId++;
  const res = await server.request('POST', '/mcp', {
    headers: {
      authorization: `Bearer ${tokens[member]}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-06-18',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id, method, params }),
  });
  if (res.status !== 200 || res.json?.id !== id) {
    throw new Error(`${method}: HTTP ${res.status} ${res.text}`);
  }
  return res.json;
}

const call = (server, member, name, args = {}) =>
  rpc(server, member, 'tools/call', { name, arguments: args });

function expectError(answer, code, what) {
  if (answer.error?.code !== code) {
    throw new Error(`${what}: expected error ${code}, got ${JSON.stringify(answer)}`);
  }
  return answer.error;
}

const calledTimes = (cid, name) =>
  (upstreamStats(stats[cid])?.called_tools ?? []).filter((n) => n === name).length;
const counted = (cid, what) => upstreamStats(stats[cid])?.calls?.[what] ?? 0;

// The edges' connections blocked in BLPOP (CLIENT LIST: the agents' XREADGROUP BLOCK are
// blocked clients too, under another user).
async function blockedClients() {
  const list = await db.call('CLIENT', 'LIST');
  return list.split('\n').filter((l) => / user=quiver-edge /.test(l) && / cmd=blpop /.test(l) &&
                                        / flags=\S*b/.test(l)).length;
}

async function openRequests(server) {
  const res = await server.request('GET', '/healthz');
  return res.json?.open_requests;
}

const tests = [
  {
    name: 'a call through the edge is performed by the agent; its answer comes back',
    fn: async () => {
      const answer = await call(edge, 'alice', 't__tool_1');
      if (answer.result?.content?.[0]?.text !== 'called tool_1') {
        throw new Error(`answered ${JSON.stringify(answer)}`);
      }
      if (calledTimes('t', 'tool_1') !== 1) throw new Error('the upstream was not called once');
    },
  },
  {
    name: "the edge's Redis user (schema/redis-acl-edge.txt) relays, never reads the queue or " +
          'fakes an agent',
    fn: async () => {
      const asEdge = await Redis.connect(redis.port, EDGE_REDIS_PASSWORD, EDGE_REDIS_USER);
      try {
        const calls = `quiver:{${NS}}:calls`;
        for (const cmd of [['XRANGE', calls, '-', '+'], ['XREADGROUP', 'GROUP', 'g', 'c', 'STREAMS',
                            calls, '>'], ['SET', `quiver:{${NS}}:call-agents`, 'x'],
                           ['LRANGE', `quiver:{${NS}}:call-reply:${'a'.repeat(64)}`, '0', '-1']]) {
          const refused = await asEdge.call(...cmd).then(() => null, (e) => e);
          if (!/NOPERM/.test(refused?.message ?? '')) {
            throw new Error(`${cmd[0]} as the edge: ${refused?.message ?? 'allowed'}`);
          }
        }
      } finally {
        asEdge.close();
      }
    },
  },
  {
    name: 'isolation: bob cannot call a connection not granted to him; nothing reaches it',
    fn: async () => {
      const before = calledTimes('t', 'tool_2');
      expectError(await call(edge, 'bob', 't__tool_2'), -32602, "bob's call");
      // bob's own connection works for him.
      const mine = await call(edge, 'bob', 'slow__tool_3');
      if (mine.result?.content?.[0]?.text !== 'called tool_3') {
        throw new Error(`bob's own call answered ${JSON.stringify(mine)}`);
      }
      if (calledTimes('t', 'tool_2') !== before) throw new Error("bob's call reached t");
    },
  },
  {
    name: "a tool disabled after the edge's L1 copy was taken is refused by the agent, not called",
    fn: async () => {
      // longEdge reads t's grant and preferences once; its L1 keeps them for 10 minutes.
      const first = await call(longEdge, 'alice', 't__tool_2');
      if (first.result?.content?.[0]?.text !== 'called tool_2') {
        throw new Error(`answered ${JSON.stringify(first)}`);
      }
      const toggled = await agent.request('PATCH', '/v1/mcp-connections/t/preferences', {
        headers: { authorization: `Bearer ${tokens.alice}`, 'content-type': 'application/json' },
        body: JSON.stringify({ type: 'tool', key: 'tool_2', enabled: false }),
      });
      if (toggled.status !== 200) throw new Error(`PATCH: ${toggled.status} ${toggled.text}`);
      // The edge's copy still shows tool_2: the call is relayed, and the agent refuses it.
      const refused = expectError(await call(longEdge, 'alice', 't__tool_2'), -32602, 'disabled');
      if (!/disabled/i.test(refused.message)) throw new Error(`refused: ${refused.message}`);
      if (calledTimes('t', 'tool_2') !== 1) throw new Error('the disabled tool was called');
      // The short-L1 edge sees the change on its next read and refuses it itself.
      await waitFor('the edge hides tool_2', async () => {
        const list = await rpc(edge, 'alice', 'tools/list', {});
        return !list.result.tools.some((t) => t.name === 't__tool_2');
      });
      expectError(await call(edge, 'alice', 't__tool_2'), -32602, 'disabled at the edge');
      if (calledTimes('t', 'tool_2') !== 1) throw new Error('the disabled tool was called');
    },
  },
  {
    name: 'an upstream hanging mid-call: the timeout error from the agent, the upstream cancelled',
    fn: async () => {
      // t's request timeout is 2 s at the agent; the edge would wait 60 s.
      const err = expectError(await call(edge, 'alice', 't__tool_3', { sleep_ms: 600000 }),
                              -32001, 'hanging call');
      if (err.data?.code !== 'TIMEOUT') throw new Error(`data: ${JSON.stringify(err)}`);
      await waitFor('the upstream told to cancel', () => counted('t', 'cancelled') === 1);
      // The session still serves the next call.
      const next = await call(edge, 'alice', 't__tool_4');
      if (next.result?.content?.[0]?.text !== 'called tool_4') {
        throw new Error(`after the timeout: ${JSON.stringify(next)}`);
      }
    },
  },
  {
    name: 'a client disconnecting mid-call: the edge stops waiting at once, the request is freed',
    fn: async () => {
      if (await blockedClients() !== 0) throw new Error('a BLPOP is already waiting');
      // slow's request timeout is 10 min: only the client going away ends the edge's wait (the
      // call's deadline is 60 s).
      const socket = await postRaw(edge, 'alice', 'tools/call',
                                   { name: 'slow__tool_1', arguments: { sleep_ms: 600000 } });
      await waitFor('the call reaching the upstream', () => calledTimes('slow', 'tool_1') === 1);
      if (await blockedClients() !== 1) throw new Error('the edge is not waiting in BLPOP');
      // The client goes away (a reset: workerd takes a mere half-close, FIN, for a client still
      // waiting for its answer, as HTTP allows; Cloudflare's front ends the request either way).
      socket.resetAndDestroy();
      await waitFor('the edge closing its BLPOP connection', async () => await blockedClients() === 0);
      await waitFor('the edge forgetting the request', async () => await openRequests(edge) === 0);
      if (!logs.some((l) => l.includes('the client went away'))) {
        throw new Error('the edge did not log the client going away');
      }
    },
  },
  {
    name: 'the agent down: AGENT_UNREACHABLE at once; tools/list still answers from the cache',
    fn: async () => {
      await agent.stop();
      agent = null;
      await waitFor('call-agents to lapse', async () => await db.call('EXISTS',
        `quiver:{${NS}}:call-agents`) === 0);
      const err = expectError(await call(edge, 'alice', 't__tool_1'), -32011, 'no agent');
      if (err.data?.code !== 'AGENT_UNREACHABLE') throw new Error(JSON.stringify(err));
      if (await blockedClients() !== 0) throw new Error('a BLPOP is left waiting');
      const list = await rpc(edge, 'alice', 'tools/list', {});
      if (!list.result?.tools?.some((t) => t.name === 't__tool_1')) {
        throw new Error(`tools/list: ${JSON.stringify(list)}`);
      }
    },
  },
  {
    name: 'Redis down: STORE_UNAVAILABLE, never a made-up result',
    fn: async () => {
      db.close();
      db = null;
      await redis.stop();
      redis = null;
      const err = expectError(await call(longEdge, 'alice', 't__tool_1'), -32014, 'no Redis');
      if (err.data?.code !== 'STORE_UNAVAILABLE') throw new Error(JSON.stringify(err));
    },
  },
];

// A JSON-RPC request written on a raw socket, its answer never read: resolves to the socket once
// the request is sent.
function postRaw(server, member, method, params) {
  const body = JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params });
  return new Promise((resolve, reject) => {
    const socket = net.connect(server.port, '127.0.0.1', () => {
      socket.write(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
                   `Authorization: Bearer ${tokens[member]}\r\n` +
                   'Content-Type: application/json\r\n' +
                   'Accept: application/json, text/event-stream\r\n' +
                   'MCP-Protocol-Version: 2025-06-18\r\n' +
                   `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`, () => resolve(socket));
    });
    socket.on('error', reject);
  });
}

async function main() {
  const started = Date.now();
  let failed = 0;
  try {
    ({ redis, db } = await startEdgeRedis(NS, EDGE_REDIS_PASSWORD));
    agent = await Agent.start({
      binary, logs,
      env: { RELAY_TEST_KEY: KEY },
      config: {
        mcpServers: { t: upstream('t'), slow: upstream('slow') },
        quiver: {
          namespace: NS,
          redis: `redis://127.0.0.1:${redis.port}/0`,
          caller_token_keys: { [KID]: { env: 'RELAY_TEST_KEY' } },
          members: ['alice', 'bob'],
          operators: ['alice'],
          grants: { alice: ['t', 'slow'], bob: ['slow'] },
          runtime: { list_timeout_ms: 15000 },
          connections: {
            t: { request_timeout_ms: 2000 },
            slow: { list_timeout_ms: 600000, request_timeout_ms: 600000 },
          },
        },
      },
    });
    tokens.alice = agent.token('alice');
    tokens.bob = agent.token('bob');
    const env = (l1TtlMs) => edgeEnv({ ns: NS, kid: KID, secret: KEY, redisPort: redis.port,
                                       edgeRedisPassword: EDGE_REDIS_PASSWORD, l1TtlMs });
    [edge] = await startEdges(1, { edgeDir, env: env(500), logs });
    [longEdge] = await startEdges(1, { edgeDir, env: env(600000), logs });
    await waitFor('both connections listed', async () => {
      const res = await edge.request('GET', '/v1/manifests',
                                     { headers: { authorization: `Bearer ${tokens.alice}` } });
      return res.status === 200 && res.json.connections.length === 2 &&
        res.json.connections.every((c) => c.status === 'fresh');
    }, 30000);
    failed += await runTests(tests, argValue('--only', ''));
  } finally {
    db?.close();
    for (const w of [edge, longEdge]) await w?.stop();
    await agent?.stop();
    await redis?.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
  finish({ failed, count: tests.length, started, logs, secrets: [KEY, EDGE_REDIS_PASSWORD] });
}

main().catch(crashed(logs));
