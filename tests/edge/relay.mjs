#!/usr/bin/env node
// The edge's call relay (shared/call_relay.h, shared/edge_service.h) end to end, with real parts:
// the native quiver-agent on a real redis-server consuming relayed calls, three controllable
// upstreams (tests/peers/test-upstream.mjs: two over stdio, one per-member connection over
// Streamable HTTP, each recording what reached it and with which credential), and the staged
// quiver-edge in workerd answering POST /mcp. What a client of the edge would notice:
//   - a call is performed by the agent and its answer comes back through the edge;
//   - isolation: a member cannot call a connection not granted to them, and a tool disabled after
//     the edge's L1 copy was taken is refused by the agent's own check (never performed);
//   - per-member credentials: alice's and bob's tools/call, resources/read, prompts/get and
//     completion/complete on the per-member connection reach the upstream with that member's own
//     credential only (the upstream records which one came); carol, not granted it, gets the MCP
//     refusal for each of the four, exactly as for a connection that does not exist, and nothing
//     reaches the upstream;
//   - an upstream hanging mid-call: the timeout error (the agent's deadline, well within the
//     edge's), and the upstream told to cancel;
//   - the edge's own call deadline (QUIVER_CALL_TIMEOUT_MS): an edge set to 2 s answers a hanging
//     call -32001 after that, long before the agent's own 10 s, and the agent cancels the call
//     upstream at the edge's deadline; a bad value is refused, /healthz naming the variable;
//   - a client that accepts text/event-stream gets a relayed call's answer as an event stream
//     (the head at once, keep-alive comments while it waits, the answer as one event); one that
//     accepts only application/json gets today's JSON; the SDK client takes either;
//   - a client disconnecting mid-call: the edge stops waiting at once (its BLPOP connection is
//     closed, the request forgotten), long before the call's deadline, and sets the call's cancel
//     mark: the agent cancels the call upstream (the upstream counts notifications/cancelled)
//     because the client went away, not at its own deadline, and writes no reply. So for a
//     reset (RST) and, on an event stream, for a graceful full close (FIN: the next keep-alive
//     write fails); a half-closed client (FIN, still reading) still gets its answer;
//   - the agent down (no `call-agents`): AGENT_UNREACHABLE at once, while tools/list still answers
//     from the cache;
//   - Redis down: STORE_UNAVAILABLE, never a made-up result.
//
//   node tests/edge/relay.mjs --edge-dir build/wasm/edge --agent build/native/native-agent/quiver-agent
import { createHash } from 'node:crypto';
import net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { pathToFileURL } from 'node:url';

import {
  Agent, HttpUpstream, agentBinaryOrSkip, nodeModules, testUpstreamScript, upstreamStats,
} from './agent.mjs';
import {
  EDGE_REDIS_USER, Redis, argValue, crashed, edgeDirArg, edgeEnv, finish, httpRequest, runTests,
  startEdgeRedis, startEdges, waitFor, waitForFresh,
} from './harness.mjs';

const binary = agentBinaryOrSkip();
const edgeDir = edgeDirArg();
const sdkModule = (p) => import(pathToFileURL(path.join(nodeModules(), p)).href);
const sdk1 = await sdkModule('@modelcontextprotocol/sdk/dist/esm/client/index.js');
const sdk1Http = await sdkModule('@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js');
const NS = 'relaytest';
const KID = 'k1';
const KEY = 'relay-test-caller-token-key-0123456789';
const EDGE_REDIS_PASSWORD = 'relay-test-edge-redis-password';
// The per-member connection `perm`: each member's own credential (not the member's name: the
// upstream names tools after the member, and a credential must never be quoted).
const PERM_CREDENTIALS = { alice: 'alice.relay-credential-a1', bob: 'bob.relay-credential-b2' };
// The short edge's QUIVER_CALL_TIMEOUT_MS, and the agent's own call deadline (call_timeout_ms);
// the other edges keep the default, 60 s.
const SHORT_CALL_TIMEOUT_MS = 2000;
const AGENT_CALL_TIMEOUT_MS = 10000;
const logs = [];
const tmp = mkdtempSync(path.join(os.tmpdir(), 'quiver-relay-'));
const stats = { t: path.join(tmp, 't.json'), slow: path.join(tmp, 'slow.json') };

let redis;
let db;
let agent;
let edge;      // L1 of 500 ms, keep-alives every 200 ms
let longEdge;  // L1 of 10 min: its copy of a grant or preference outlives a change
let shortEdge; // QUIVER_CALL_TIMEOUT_MS of 2 s
let perm;      // the per-member connection's upstream (HTTP, --per-auth)
let edgeEnvOf; // (l1TtlMs, extra) → an edge's environment for this suite
const tokens = {};

const upstream = (cid) => ({
  command: process.execPath,
  args: [testUpstreamScript, 'stdio', '--quiet', '--tools', '4', '--stats-file', stats[cid]],
  env: { QUIVER_NODE_MODULES: nodeModules() },
});

// The JSON-RPC messages of an event-stream body (`event: message` events; comments skipped),
// and the number of comments (keep-alives) before the first message.
function sseMessages(text) {
  const messages = [];
  let comments = 0;
  for (const block of text.split('\n\n')) {
    if (!block) continue;
    const lines = block.split('\n');
    if (lines.every((l) => l.startsWith(':'))) {
      if (messages.length === 0) comments++;
      continue;
    }
    if (lines[0] !== 'event: message' || lines.length !== 2 || !lines[1].startsWith('data: ')) {
      throw new Error(`not an MCP event: ${JSON.stringify(block)}`);
    }
    messages.push(JSON.parse(lines[1].slice('data: '.length)));
  }
  return { messages, comments };
}

// One JSON-RPC request to `server`'s /mcp as `member` (2025-06-18, no session), accepting both
// answers as MCP clients must (or `accept`). An event-stream answer must hold exactly the one
// response; `answers` counts which kind each method got.
const BOTH = 'application/json, text/event-stream';
const answers = { json: {}, sse: {} };
let nextId = 1;
async function rpc(server, member, method, params, accept = BOTH) {
  const id = nextId++;
  const res = await server.request('POST', '/mcp', {
    headers: {
      authorization: `Bearer ${tokens[member]}`,
      'content-type': 'application/json',
      accept,
      'mcp-protocol-version': '2025-06-18',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id, method, params }),
  });
  let message = res.json;
  const sse = (res.headers['content-type'] ?? '').startsWith('text/event-stream');
  if (sse) {
    const { messages } = sseMessages(res.text);
    if (messages.length !== 1) throw new Error(`${method}: ${messages.length} events: ${res.text}`);
    [message] = messages;
    if (res.headers['cache-control'] !== 'no-store') {
      throw new Error(`${method}: an event stream with Cache-Control ${res.headers['cache-control']}`);
    }
  }
  const kind = sse ? answers.sse : answers.json;
  kind[method] = (kind[method] ?? 0) + 1;
  if (res.status !== 200 || message?.id !== id) {
    throw new Error(`${method}: HTTP ${res.status} ${res.text}`);
  }
  return message;
}

const call = (server, member, name, args = {}) =>
  rpc(server, member, 'tools/call', { name, arguments: args });

function expectError(answer, code, what) {
  if (answer.error?.code !== code) {
    throw new Error(`${what}: expected error ${code}, got ${JSON.stringify(answer)}`);
  }
  return answer.error;
}

const sha256 = (text) => createHash('sha256').update(text).digest('hex');
// What perm's upstream counted and served (tests/peers/README.md, "Counters").
async function permStats() {
  const res = await httpRequest(perm.port, 'GET', '/control/stats');
  if (res.status !== 200) throw new Error(`perm stats: ${res.status} ${res.text}`);
  return res.json;
}
const RELAYED = ['tools/call', 'resources/read', 'prompts/get', 'completion/complete'];
// One request of each relayed method on connection `cid` (as the edge exposes its names); the
// tool is `tool`.
const relayedRequests = (cid, tool, value) => [
  ['tools/call', { name: `${cid}__${tool}`, arguments: {} }],
  ['resources/read', { uri: `quiver://${cid}/test://resource/1` }],
  ['prompts/get', { name: `${cid}__prompt_1` }],
  ['completion/complete', { ref: { type: 'ref/prompt', name: `${cid}__prompt_1` },
                            argument: { name: 'topic', value } }],
];

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
    name: 'per-member credentials: each relayed method of alice and of bob reaches the upstream ' +
          "with that member's own credential only",
    fn: async () => {
      const before = (await permStats()).served.length;
      for (const member of ['alice', 'bob']) {
        const answers = [];
        for (const [method, params] of relayedRequests('perm', `${member}_tool_1`, member)) {
          const answer = await rpc(edge, member, method, params);
          if (!answer.result) throw new Error(`${member}'s ${method}: ${JSON.stringify(answer)}`);
          answers.push(answer.result);
        }
        const [called, contents, got, completed] = answers;
        if (called.content?.[0]?.text !== `called ${member}_tool_1`) {
          throw new Error(`${member}'s call: ${JSON.stringify(called)}`);
        }
        // The upstream's URI goes back exposed.
        const content = contents.contents?.[0];
        if (content?.uri !== 'quiver://perm/test://resource/1' ||
            content?.text !== 'content of test://resource/1') {
          throw new Error(`${member}'s read: ${JSON.stringify(contents)}`);
        }
        if (got.messages?.[0]?.content?.text !== 'prompt prompt_1') {
          throw new Error(`${member}'s prompt: ${JSON.stringify(got)}`);
        }
        if (JSON.stringify(completed.completion?.values) !== JSON.stringify([`${member}-completed`])) {
          throw new Error(`${member}'s completion: ${JSON.stringify(completed)}`);
        }
      }
      // bob naming alice's tool: performed on bob's own session, with bob's credential, where the
      // upstream knows no such tool.
      const crossed = expectError(await call(edge, 'bob', 'perm__alice_tool_1'), -32602,
                                  "bob's call of alice's tool");
      if (!/unknown tool/.test(crossed.message)) throw new Error(crossed.message);
      // What the upstream saw, request by request: each with its member's own credential.
      const want = [];
      for (const member of ['alice', 'bob']) {
        const seen = { user: member, auth_sha256: sha256(`Bearer ${PERM_CREDENTIALS[member]}`) };
        want.push({ method: 'tools/call', target: `${member}_tool_1`, ...seen },
                  { method: 'resources/read', target: 'test://resource/1', ...seen },
                  { method: 'prompts/get', target: 'prompt_1', ...seen },
                  { method: 'completion/complete', target: 'prompt_1', ...seen });
      }
      want.push({ method: 'tools/call', target: 'alice_tool_1', user: 'bob',
                  auth_sha256: sha256(`Bearer ${PERM_CREDENTIALS.bob}`) });
      const served = (await permStats()).served.slice(before);
      if (JSON.stringify(served) !== JSON.stringify(want)) {
        throw new Error(`the upstream saw\n${JSON.stringify(served, null, 1)}\nwant\n` +
                        JSON.stringify(want, null, 1));
      }
    },
  },
  {
    name: 'isolation: carol, not granted the per-member connection, is refused each relayed ' +
          'method as for a connection that does not exist; nothing reaches the upstream',
    fn: async () => {
      const before = await permStats();
      // -32602 unknown tool / prompt; a resource in the 2025 eras: -32002 resource not found.
      const codes = { 'tools/call': -32602, 'resources/read': -32002, 'prompts/get': -32602,
                      'completion/complete': -32602 };
      const nosuch = relayedRequests('nosuch', 'alice_tool_1', 'x');
      for (const [i, [method, params]] of relayedRequests('perm', 'alice_tool_1', 'x').entries()) {
        for (const w of [edge, longEdge]) {
          const refused = expectError(await rpc(w, 'carol', method, params), codes[method],
                                      `carol's ${method}`);
          const unknown = expectError(await rpc(w, 'carol', method, nosuch[i][1]), codes[method],
                                      `carol's ${method} of a connection that does not exist`);
          if (JSON.stringify(unknown).replaceAll('nosuch', 'perm') !== JSON.stringify(refused)) {
            throw new Error(`${method}: ${JSON.stringify(refused)} tells an ungranted connection ` +
                            `from a missing one (${JSON.stringify(unknown)})`);
          }
        }
      }
      const after = await permStats();
      for (const method of RELAYED) {
        if ((after.calls[method] ?? 0) !== (before.calls[method] ?? 0)) {
          throw new Error(`carol's ${method} reached the upstream`);
        }
      }
      if (after.served.length !== before.served.length) {
        throw new Error(`the upstream served ${JSON.stringify(after.served.slice(before.served.length))}`);
      }
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
      // The agent's call deadline is 10 s (call_timeout_ms); the edge would wait 60 s.
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
    name: 'QUIVER_CALL_TIMEOUT_MS: an edge set to 2 s answers a hanging call -32001 after it, ' +
          "long before the agent's own deadline; the agent cancels the call upstream",
    fn: async () => {
      const cancelled = counted('slow', 'cancelled');
      // slow's request timeout is 10 min and the agent's call deadline 10 s: only the edge's
      // deadline, which the relayed request carries to the agent, ends this call.
      const t0 = Date.now();
      const err = expectError(await call(shortEdge, 'alice', 'slow__tool_2', { sleep_ms: 600000 }),
                              -32001, 'hanging call at the 2 s edge');
      const took = Date.now() - t0;
      if (err.data?.code !== 'TIMEOUT') throw new Error(`data: ${JSON.stringify(err)}`);
      // Not before the edge's deadline (less the edge's coarse clock), and not the agent's.
      if (took < SHORT_CALL_TIMEOUT_MS - 500 || took >= AGENT_CALL_TIMEOUT_MS) {
        throw new Error(`answered after ${took} ms`);
      }
      await waitFor('the upstream told to cancel', () => counted('slow', 'cancelled') === cancelled + 1);
      await waitFor('the edge closing its BLPOP connection', async () => await blockedClients() === 0);
      // A bad value: the edge refuses to serve and /healthz names the variable, never the value.
      const badLogs = [];
      const [bad] = await startEdges(1, { edgeDir, logs: badLogs,
                                          env: edgeEnvOf(500, { QUIVER_CALL_TIMEOUT_MS: '0' }) });
      try {
        const health = await bad.request('GET', '/healthz');
        if (health.status !== 503 || !health.text.includes('QUIVER_CALL_TIMEOUT_MS')) {
          throw new Error(`/healthz of an edge with QUIVER_CALL_TIMEOUT_MS=0: ${health.status} ` +
                          health.text);
        }
      } finally {
        await bad.stop();
      }
    },
  },
  {
    name: 'a client taking an event stream gets each relayed answer as one event; a client ' +
          'taking only JSON gets JSON; lists stay JSON',
    fn: async () => {
      // So far every request of this suite accepted both: each relayed method was answered as
      // an event stream once relayed (the refusals from the edge's own snapshot, carol's, never
      // wait on a relay and stay JSON), and every list as JSON.
      for (const method of RELAYED) {
        if (!answers.sse[method] || !answers.json[method]) {
          throw new Error(`${method} answered ${JSON.stringify(answers)}`);
        }
      }
      if (answers.sse['tools/list'] || !answers.json['tools/list']) {
        throw new Error(`tools/list answered ${JSON.stringify(answers)}`);
      }
      // A call waiting 2.5 s on the upstream, through a raw socket: the head comes before the
      // answer, then keep-alive comments (1 s apart by default), then the answer's one event.
      const socket = await postRaw(edge, 'alice', 'tools/call',
                                   { name: 'slow__tool_2', arguments: { sleep_ms: 2500 } });
      const got = await readResponse(socket);
      if (got.headAt >= got.answerAt) throw new Error('the head came with the answer');
      if (!/^HTTP\/1\.1 200 /.test(got.head) || !/content-type: text\/event-stream/i.test(got.head) ||
          !/x-accel-buffering: no/i.test(got.head) || !/x-request-id: [0-9a-f]{16}/i.test(got.head)) {
        throw new Error(`head: ${got.head}`);
      }
      const { messages, comments } = sseMessages(got.body);
      if (messages.length !== 1 || messages[0].result?.content?.[0]?.text !== 'called tool_2') {
        throw new Error(`body: ${got.body}`);
      }
      console.log(`  (${comments} keep-alive comments while the 2.5 s call ran)`);
      if (comments < 1) throw new Error(`no keep-alive before the answer: ${JSON.stringify(got.body)}`);
      // Only JSON accepted: today's answer.
      const res = await edge.request('POST', '/mcp', {
        headers: { authorization: `Bearer ${tokens.alice}`, 'content-type': 'application/json',
                   accept: 'application/json', 'mcp-protocol-version': '2025-06-18' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call',
                               params: { name: 't__tool_1', arguments: {} } }),
      });
      if (res.status !== 200 || !res.headers['content-type'].startsWith('application/json') ||
          res.json?.result?.content?.[0]?.text !== 'called tool_1') {
        throw new Error(`JSON only: ${res.status} ${res.headers['content-type']} ${res.text}`);
      }
      // A refusal before any wait stays JSON too, with its status.
      const refused = await edge.request('POST', '/mcp', {
        headers: { 'content-type': 'application/json', accept: BOTH },
        body: JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'tools/call',
                               params: { name: 't__tool_1', arguments: {} } }),
      });
      if (refused.status !== 401 || !refused.headers['content-type'].startsWith('application/json')) {
        throw new Error(`no token: ${refused.status} ${refused.headers['content-type']}`);
      }
    },
  },
  {
    name: 'the SDK client (1.x) calls, reads, gets a prompt and completes through the edge; the ' +
          'answers arrive as event streams',
    fn: async () => {
      const contentTypes = [];
      const fetchAndNote = async (url, init) => {
        const res = await fetch(url, init);
        const body = init?.body ? JSON.parse(init.body) : null;
        if (body?.method && RELAYED.includes(body.method)) {
          contentTypes.push(`${body.method} ${res.headers.get('content-type')}`);
        }
        return res;
      };
      const transport = new sdk1Http.StreamableHTTPClientTransport(
        new URL(`http://127.0.0.1:${edge.port}/mcp`),
        { requestInit: { headers: { Authorization: `Bearer ${tokens.bob}` } }, fetch: fetchAndNote });
      const client = new sdk1.Client({ name: 'relay-test', version: '1.0.0' });
      await client.connect(transport);
      try {
        const called = await client.callTool({ name: 'perm__bob_tool_2', arguments: {} });
        if (called.content?.[0]?.text !== 'called bob_tool_2') throw new Error(JSON.stringify(called));
        const read = await client.readResource({ uri: 'quiver://perm/test://resource/1' });
        if (read.contents?.[0]?.text !== 'content of test://resource/1') {
          throw new Error(JSON.stringify(read));
        }
        const prompt = await client.getPrompt({ name: 'perm__prompt_1' });
        if (prompt.messages?.[0]?.content?.text !== 'prompt prompt_1') {
          throw new Error(JSON.stringify(prompt));
        }
        const done = await client.complete({ ref: { type: 'ref/prompt', name: 'perm__prompt_1' },
                                             argument: { name: 'topic', value: 'bob' } });
        if (JSON.stringify(done.completion?.values) !== JSON.stringify(['bob-completed'])) {
          throw new Error(JSON.stringify(done));
        }
      } finally {
        await client.close();
      }
      const want = RELAYED.map((m) => `${m} text/event-stream`);
      if (JSON.stringify(contentTypes) !== JSON.stringify(want)) {
        throw new Error(`content types: ${JSON.stringify(contentTypes)}`);
      }
    },
  },
  {
    name: 'a client disconnecting mid-call: the edge stops waiting at once, the request is freed, ' +
          'the call is cancelled upstream',
    fn: async () => {
      if (await blockedClients() !== 0) throw new Error('a BLPOP is already waiting');
      // slow's request timeout is 10 min: only the client going away ends the edge's wait (the
      // edge's deadline is 60 s; the agent answers at its own, 10 s, after cancelling upstream).
      const cancelled = counted('slow', 'cancelled');
      // A client taking only JSON: no event stream, so only a reset tells the edge (below).
      const socket = await postRaw(edge, 'alice', 'tools/call',
                                   { name: 'slow__tool_1', arguments: { sleep_ms: 600000 } },
                                   'application/json');
      await waitFor('the call reaching the upstream', () => calledTimes('slow', 'tool_1') === 1);
      if (await blockedClients() !== 1) throw new Error('the edge is not waiting in BLPOP');
      // The client goes away with a reset: request.signal aborts at once (workerd 1.20261117.1).
      // A graceful close (FIN) of a client waiting for a JSON answer is not noticed before the
      // answer: nothing is written until then (docs/design.md, "Calls through the agent"); a
      // client taking an event stream is (the next test).
      const repliesBefore = await db.call('KEYS', `quiver:{${NS}}:call-reply:*`);
      socket.resetAndDestroy();
      await waitFor('the edge closing its BLPOP connection', async () => await blockedClients() === 0);
      await waitFor('the edge forgetting the request', async () => await openRequests(edge) === 0);
      if (!logs.some((l) => l.includes('the client went away'))) {
        throw new Error('the edge did not log the client going away');
      }
      // The edge left the call's cancel mark (the rid is the edge's own: found by its pattern)...
      await waitFor("the call's cancel mark", async () =>
        (await db.call('KEYS', `quiver:{${NS}}:call-cancel:*`)).length === 1);
      // ...the agent's poller saw it and the upstream was told to cancel...
      await waitFor('the upstream told to cancel', () => counted('slow', 'cancelled') === cancelled + 1);
      // ...because the client went away, not at the agent's own deadline (10 s: the call would
      // then end as a timeout, logged as such, and its reply be written).
      if (!logs.some((l) => l.includes('cancelled: its client went away at the edge'))) {
        throw new Error(`the agent did not cancel the call for the edge:\n${logs.slice(-30).join('\n')}`);
      }
      const replies = await db.call('KEYS', `quiver:{${NS}}:call-reply:*`);
      const written = replies.filter((key) => !repliesBefore.includes(key));
      if (written.length !== 0) throw new Error(`a reply was written: ${written}`);
      if (logs.some((l) => l.includes('cancel mark not sent'))) {
        throw new Error('the edge logged a failed cancel mark');
      }
    },
  },
  {
    name: 'a client taking an event stream that closes gracefully mid-call (FIN, then close): ' +
          'the next keep-alive write fails, the edge stops waiting, the call is cancelled upstream',
    fn: async () => {
      if (await blockedClients() !== 0) throw new Error('a BLPOP is already waiting');
      // longEdge keeps the default keep-alive interval (QUIVER_MCP_KEEPALIVE_MS, 1 s). t's grant
      // comes from its L1 (the Redis-down test below needs that copy: a newer epoch read here
      // would retire it). The agent's deadline is 10 s; only the client's close ends it sooner.
      const cancelled = counted('t', 'cancelled');
      const called = calledTimes('t', 'tool_3');
      const marksBefore = await db.call('KEYS', `quiver:{${NS}}:call-cancel:*`);
      const repliesBefore = await db.call('KEYS', `quiver:{${NS}}:call-reply:*`);
      const logsBefore = logs.length;
      const socket = await postRaw(longEdge, 'alice', 'tools/call',
                                   { name: 't__tool_3', arguments: { sleep_ms: 600000 } });
      const r = new RawResponse(socket);
      await waitFor('the call reaching the upstream', () => calledTimes('t', 'tool_3') === called + 1);
      await waitFor('the event stream opening', () => r.head !== null);
      if (!/content-type: text\/event-stream/i.test(r.head)) throw new Error(`head: ${r.head}`);
      if (await blockedClients() !== 1) throw new Error('the edge is not waiting in BLPOP');
      // A graceful full close: FIN (end), then the socket is closed once the FIN is out
      // (destroySoon); no RST leaves this side until the edge writes to the closed socket.
      const t0 = Date.now();
      socket.end();
      socket.destroySoon();
      await waitFor('the edge closing its BLPOP connection', async () => await blockedClients() === 0);
      await waitFor('the edge forgetting the request', async () => await openRequests(longEdge) === 0);
      await waitFor("the call's cancel mark", async () =>
        (await db.call('KEYS', `quiver:{${NS}}:call-cancel:*`)).length === marksBefore.length + 1);
      const marked = Date.now() - t0;
      await waitFor('the upstream told to cancel', () => counted('t', 'cancelled') === cancelled + 1);
      const upstreamTold = Date.now() - t0;
      console.log(`  (FIN → cancel mark ${marked} ms, → upstream cancelled ${upstreamTold} ms; ` +
                  "keep-alive interval 1000 ms, the agent's call deadline 10000 ms)");
      const since = logs.slice(logsBefore);
      if (!since.some((l) => l.includes('the client went away'))) {
        throw new Error('the edge did not log the client going away');
      }
      // Cancelled because the client went away, not at the agent's own deadline (10 s).
      if (!since.some((l) => l.includes('cancelled: its client went away at the edge'))) {
        throw new Error(`the agent did not cancel the call for the edge:\n${since.join('\n')}`);
      }
      const replies = await db.call('KEYS', `quiver:{${NS}}:call-reply:*`);
      const written = replies.filter((key) => !repliesBefore.includes(key));
      if (written.length !== 0) throw new Error(`a reply was written: ${written}`);
    },
  },
  {
    name: 'a half-closed client (FIN, still reading) is not gone: it gets its answer, nothing is ' +
          'cancelled',
    fn: async () => {
      const cancelled = counted('slow', 'cancelled');
      const marksBefore = (await db.call('KEYS', `quiver:{${NS}}:call-cancel:*`)).length;
      const socket = await postRaw(edge, 'alice', 'tools/call',
                                   { name: 'slow__tool_3', arguments: { sleep_ms: 1500 } });
      const answer = readResponse(socket);
      socket.end();  // FIN: the request is complete, the client still reads
      const r = await answer;
      const { messages, comments } = sseMessages(r.body);
      if (messages.length !== 1 || messages[0].result?.content?.[0]?.text !== 'called tool_3') {
        throw new Error(`answer: ${r.body}`);
      }
      console.log(`  (${comments} keep-alive comments reached the half-closed client)`);
      if (counted('slow', 'cancelled') !== cancelled) throw new Error('the call was cancelled');
      if ((await db.call('KEYS', `quiver:{${NS}}:call-cancel:*`)).length !== marksBefore) {
        throw new Error('a cancel mark was set');
      }
      socket.destroy();
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

// A JSON-RPC request written on a raw socket, its answer not read here: resolves to the socket
// once the request is sent.
function postRaw(server, member, method, params, accept = BOTH) {
  const body = JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params });
  return new Promise((resolve, reject) => {
    const socket = net.connect(server.port, '127.0.0.1', () => {
      socket.write(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
                   `Authorization: Bearer ${tokens[member]}\r\n` +
                   'Content-Type: application/json\r\n' +
                   `Accept: ${accept}\r\n` +
                   'MCP-Protocol-Version: 2025-06-18\r\n' +
                   `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`, () => resolve(socket));
    });
    socket.on('error', reject);
  });
}

// What arrives on `socket` (an HTTP/1.1 response): `head` once the head is complete, `body` (the
// de-chunked body so far), `ended` once the last chunk came, and the index of the `data` event
// that completed the head and that brought the first `event: message` (which came first, with no
// clock involved).
class RawResponse {
  constructor(socket) {
    this.raw = Buffer.alloc(0);
    this.head = null;
    this.body = '';
    this.ended = false;
    this.closed = false;
    this.chunks = 0;
    this.headAt = -1;
    this.answerAt = -1;
    socket.on('data', (d) => this.data(d));
    socket.on('close', () => { this.closed = true; });
    socket.on('error', () => {});
  }

  data(d) {
    this.chunks++;
    this.raw = Buffer.concat([this.raw, d]);
    if (this.head === null) {
      const at = this.raw.indexOf('\r\n\r\n');
      if (at < 0) return;
      this.head = this.raw.subarray(0, at).toString('latin1');
      this.raw = this.raw.subarray(at + 4);
      this.headAt = this.chunks;
      if (!/transfer-encoding: chunked/i.test(this.head)) throw new Error(`not chunked: ${this.head}`);
    }
    for (;;) {  // whole chunks only
      const eol = this.raw.indexOf('\r\n');
      if (eol < 0) return;
      const size = Number.parseInt(this.raw.subarray(0, eol).toString('latin1'), 16);
      if (this.raw.length < eol + 2 + size + 2) return;
      this.body += this.raw.subarray(eol + 2, eol + 2 + size).toString('utf8');
      this.raw = this.raw.subarray(eol + 2 + size + 2);
      if (size === 0) this.ended = true;
      if (this.answerAt < 0 && this.body.includes('event: message')) this.answerAt = this.chunks;
    }
  }
}

async function readResponse(socket) {
  const r = new RawResponse(socket);
  await waitFor('the answer', () => r.ended || r.closed, 30000);
  if (!r.ended) throw new Error(`the connection closed before the answer ended: ${r.head} ${r.body}`);
  return r;
}

async function main() {
  const started = Date.now();
  let failed = 0;
  try {
    ({ redis, db } = await startEdgeRedis(NS, EDGE_REDIS_PASSWORD));
    perm = await HttpUpstream.start(['--per-auth', '--completions'], { logs });
    agent = await Agent.start({
      binary, logs,
      env: { RELAY_TEST_KEY: KEY, RELAY_PERM_ALICE: PERM_CREDENTIALS.alice,
             RELAY_PERM_BOB: PERM_CREDENTIALS.bob },
      config: {
        mcpServers: { t: upstream('t'), slow: upstream('slow'),
                      perm: { type: 'http', url: perm.url } },
        quiver: {
          namespace: NS,
          redis: `redis://127.0.0.1:${redis.port}/0`,
          caller_token_keys: { [KID]: { env: 'RELAY_TEST_KEY' } },
          members: ['alice', 'bob', 'carol'],
          operators: ['alice'],
          grants: { alice: ['t', 'slow', 'perm'], bob: ['slow', 'perm'], carol: ['slow'] },
          allow_private_upstreams: true,
          runtime: { list_timeout_ms: 15000, call_timeout_ms: AGENT_CALL_TIMEOUT_MS },
          connections: {
            t: { request_timeout_ms: 2000 },
            slow: { list_timeout_ms: 600000, request_timeout_ms: 600000 },
            perm: {
              credential_mode: 'per_member',
              auth: 'bearer',
              credentials: { alice: { env: 'RELAY_PERM_ALICE' }, bob: { env: 'RELAY_PERM_BOB' } },
            },
          },
        },
      },
    });
    tokens.alice = agent.token('alice');
    tokens.bob = agent.token('bob');
    tokens.carol = agent.token('carol');
    edgeEnvOf = (l1TtlMs, extra = {}) => edgeEnv({
      ns: NS, kid: KID, secret: KEY, redisPort: redis.port,
      edgeRedisPassword: EDGE_REDIS_PASSWORD, l1TtlMs, extra });
    // `edge` writes keep-alives every 200 ms (the others at the default, 1 s).
    [edge] = await startEdges(1, { edgeDir, env: edgeEnvOf(500, { QUIVER_MCP_KEEPALIVE_MS: '200' }),
                                   logs });
    [longEdge] = await startEdges(1, { edgeDir, env: edgeEnvOf(600000), logs });
    [shortEdge] = await startEdges(1, {
      edgeDir, logs,
      env: edgeEnvOf(500, { QUIVER_CALL_TIMEOUT_MS: String(SHORT_CALL_TIMEOUT_MS) }) });
    // Each member's connections listed (perm per member: the first read queues the listing).
    for (const [member, count] of [['alice', 3], ['bob', 2], ['carol', 1]]) {
      await waitForFresh(edge, tokens[member], count);
    }
    failed += await runTests(tests, argValue('--only', ''));
  } finally {
    db?.close();
    for (const w of [edge, longEdge, shortEdge]) await w?.stop();
    await agent?.stop();
    await perm?.stop();
    await redis?.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
  finish({ failed, count: tests.length, started, logs,
           secrets: [KEY, EDGE_REDIS_PASSWORD, ...Object.values(PERM_CREDENTIALS)] });
}

main().catch(crashed(logs));
