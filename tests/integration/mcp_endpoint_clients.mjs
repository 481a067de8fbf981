#!/usr/bin/env node
// The agent's /mcp (shared/mcp_endpoint.h) against the official TypeScript SDK clients: 1.x
// (`@modelcontextprotocol/sdk`, `initialize`, 2025-era) and 2.x (`@modelcontextprotocol/client`,
// which negotiates 2026-07-28 through `server/discover`). `quiver-agent serve` (embedded SQLite)
// holds two real upstreams, server-everything and server-memory, both stdio; alice is granted both,
// bob only memory. Each client lists every kind (tools, resources, resource templates, prompts),
// every page, and what arrived on the wire must be exactly the agent's cached lists
// (GET /v1/manifests?view=mcp) with each name or URI exposed per connection; bob never sees
// alice's connections; each client calls `echo`, reads a resource and gets a prompt, and bob's
// call to a connection he is not granted is refused, never performed.
//
//   node tests/integration/mcp_endpoint_clients.mjs --agent QUIVER_AGENT [--edge-dir DIR]
//
// With --edge-dir (the ctest wasm.edge_mcp), the same tests run against the edge's /mcp: the
// agent then keeps its cache in a real redis-server and the staged quiver-edge in workerd serves
// /mcp (and the /v1/manifests the expectations are read from) from that Redis. Calls then go
// through the edge's Redis relay (shared/call_relay.h) to the agent, which consumes them.
import { isDeepStrictEqual } from 'node:util';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { Agent, agentBinaryOrSkip, nodeModules } from '../edge/agent.mjs';
import {
  argValue, crashed, edgeEnv, finish, runTests, startEdgeRedis, startEdges, waitForFresh,
} from '../edge/harness.mjs';

const binary = agentBinaryOrSkip();
const nm = nodeModules();
const mod = (p) => import(pathToFileURL(path.join(nm, p)).href);
const sdk1 = await mod('@modelcontextprotocol/sdk/dist/esm/client/index.js');
const sdk1Http = await mod('@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js');
const sdk2 = await mod('@modelcontextprotocol/client/dist/index.mjs');

const KEY = 'mcp-endpoint-test-key-0123456789abcdef';
const logs = [];
const tmp = mkdtempSync(path.join(os.tmpdir(), 'quiver-mcp-endpoint-'));
const KINDS = [
  ['tools/list', 'tools', 'name', (c, p) => c.listTools(p)],
  ['resources/list', 'resources', 'uri', (c, p) => c.listResources(p)],
  ['resources/templates/list', 'resourceTemplates', 'uriTemplate',
   (c, p) => c.listResourceTemplates(p)],
  ['prompts/list', 'prompts', 'name', (c, p) => c.listPrompts(p)],
];

// The naming scheme of shared/mcp_endpoint.h (connection ids here hold no `_`).
const exposed = (field, cid, name) =>
  (field === 'name' ? `${cid}__${name}` : `quiver://${cid}/${name}`);

let agent;
let server;  // what the clients talk to: the agent, or the edge in workerd
let redis;
let db;
const edges = [];
const tokens = {};
const edgeDir = argValue('--edge-dir', '');
const NS = 'mcptest';
const KID = 'k1';
const EDGE_REDIS_PASSWORD = 'mcp-endpoint-edge-redis-password';

// What the agent's cache holds for `member`, as the endpoint must list it.
async function expected(member) {
  const res = await server.request('GET', '/v1/manifests?view=mcp',
                                  { headers: { authorization: `Bearer ${tokens[member]}` } });
  if (res.status !== 200) throw new Error(`/v1/manifests: ${res.status} ${res.text}`);
  const out = {};
  for (const [method, field, key] of KINDS) {
    out[field] = [];
    const entries = [...res.json.connections].sort((a, b) => (a.id < b.id ? -1 : 1));
    for (const entry of entries) {
      const list = entry.mcp?.[method]?.[field];
      if (!list) continue;
      for (const item of list) out[field].push({ ...item, [key]: exposed(key, entry.id, item[key]) });
    }
  }
  return out;
}

// Every page of every kind as it arrived on the wire (before the client's own validation).
async function listAll(client, transport) {
  const pages = [];
  const delivered = transport.onmessage;
  transport.onmessage = (message, extra) => {
    if (message && 'result' in message) pages.push(message.result);
    delivered.call(transport, message, extra);
  };
  const out = {};
  for (const [, field, , call] of KINDS) {
    const items = [];
    let cursor;
    let rounds = 0;
    do {
      const before = pages.length;
      await call(client, cursor ? { cursor } : {});
      const got = pages.slice(before).filter((r) => Array.isArray(r?.[field]));
      if (got.length === 0) throw new Error(`${field}: no page on the wire`);
      for (const page of got) {
        if (page.cacheScope !== 'private') throw new Error(`${field}: cacheScope ${page.cacheScope}`);
        if (typeof page.ttlMs !== 'number') throw new Error(`${field}: no ttlMs`);
        items.push(...page[field]);
      }
      cursor = got[got.length - 1].nextCursor;
      if (++rounds > 100) throw new Error(`${field}: more than 100 pages`);
    } while (cursor);
    out[field] = items;
  }
  return out;
}

function sameLists(got, want, who) {
  for (const [, field] of KINDS) {
    if (!isDeepStrictEqual(got[field], want[field])) {
      const names = (l) => JSON.stringify(l.map((i) => i.name ?? i.uri ?? i.uriTemplate));
      throw new Error(`${who}: ${field} differ:\n got ${names(got[field])}\n want ${names(want[field])}`);
    }
  }
}

const url = () => new URL(`http://127.0.0.1:${server.port}/mcp`);
const auth = (member) => ({ headers: { Authorization: `Bearer ${tokens[member]}` } });

async function connect1(member) {
  const client = new sdk1.Client({ name: 'sdk1', version: '1.0.0' });
  const transport = new sdk1Http.StreamableHTTPClientTransport(url(),
                                                              { requestInit: auth(member) });
  await client.connect(transport);
  return { client, transport };
}

async function connect2(member) {
  const client = new sdk2.Client({ name: 'sdk2', version: '1.0.0' },
                                 { versionNegotiation: { mode: 'auto' } });
  const transport = new sdk2.StreamableHTTPClientTransport(url(), { requestInit: auth(member) });
  await client.connect(transport);
  return { client, transport };
}

const tests = [
  {
    name: 'sdk 1.x lists every kind, exactly the cache with exposed names (2025 era)',
    fn: async () => {
      const { client, transport } = await connect1('alice');
      try {
        const version = transport.protocolVersion;
        if (version !== '2025-11-25' && version !== '2025-06-18') {
          throw new Error(`negotiated ${version}`);
        }
        const want = await expected('alice');
        if (want.tools.length < 10 || want.prompts.length < 1 || want.resources.length < 1 ||
            want.resourceTemplates.length < 1) {
          throw new Error(`the cache holds too little: ${JSON.stringify(Object.fromEntries(
            Object.entries(want).map(([k, v]) => [k, v.length])))}`);
        }
        sameLists(await listAll(client, transport), want, 'sdk1 alice');
      } finally {
        await client.close();
      }
    },
  },
  {
    name: 'sdk 2.x lists every kind in 2026-07-28 (server/discover, no session)',
    fn: async () => {
      const { client, transport } = await connect2('alice');
      try {
        const version = client.getNegotiatedProtocolVersion();
        if (version !== '2026-07-28') throw new Error(`negotiated ${version}`);
        sameLists(await listAll(client, transport), await expected('alice'), 'sdk2 alice');
      } finally {
        await client.close();
      }
    },
  },
  {
    name: 'a member lists only what is granted to them',
    fn: async () => {
      for (const connect of [connect1, connect2]) {
        const { client, transport } = await connect('bob');
        try {
          const got = await listAll(client, transport);
          const want = await expected('bob');
          sameLists(got, want, 'bob');
          const all = JSON.stringify(got);
          if (all.includes('everything__') || all.includes('quiver://everything/')) {
            throw new Error('bob sees the everything connection');
          }
          if (!got.tools.some((t) => t.name.startsWith('memory__'))) {
            throw new Error('bob sees no memory tool');
          }
        } finally {
          await client.close();
        }
      }
    },
  },
  {
    name: 'calls: echo, a resource read and a prompt in both eras, performed by the agent (at ' +
          'the edge: relayed to it through Redis)',
    fn: async () => {
      for (const connect of [connect1, connect2]) {
        const { client } = await connect('alice');
        try {
          const echoed = await client.callTool({ name: 'everything__echo',
                                                 arguments: { message: 'hi from mcp' } });
          const text = (echoed.content ?? []).map((c) => c.text ?? '').join(' ');
          if (!text.includes('hi from mcp')) {
            throw new Error(`echo answered ${JSON.stringify(echoed)}`);
          }
          const { resources } = await client.listResources();
          const resource = resources.find((r) => r.uri.startsWith('quiver://everything/'));
          if (!resource) throw new Error('no resource of everything is listed');
          const read = await client.readResource({ uri: resource.uri });
          if (!Array.isArray(read.contents) || read.contents.length === 0) {
            throw new Error(`reading ${resource.uri} answered ${JSON.stringify(read)}`);
          }
          if (!read.contents.every((c) => c.uri.startsWith('quiver://everything/'))) {
            throw new Error(`the read's URIs are not exposed: ${JSON.stringify(read.contents)}`);
          }
          const { prompts } = await client.listPrompts();
          const prompt = prompts.find((p) => p.name.startsWith('everything__') &&
                                             !(p.arguments ?? []).some((x) => x.required));
          if (!prompt) throw new Error('no argument-free prompt of everything is listed');
          const got = await client.getPrompt({ name: prompt.name, arguments: {} });
          if (!Array.isArray(got.messages) || got.messages.length === 0) {
            throw new Error(`${prompt.name} answered ${JSON.stringify(got)}`);
          }
          let error;
          // An ungranted connection's tool is unknown, whoever asks.
          error = undefined;
          try {
            await client.callTool({ name: 'nosuch__echo', arguments: {} });
          } catch (e) {
            error = e;
          }
          if (!error || error.code !== -32602) throw new Error(`expected -32602, got ${error?.code}`);
        } finally {
          await client.close();
        }
        // bob is not granted everything: its echo is unknown to him, never called.
        const { client: bob } = await connect('bob');
        try {
          let refused;
          try {
            await bob.callTool({ name: 'everything__echo', arguments: { message: 'x' } });
          } catch (e) {
            refused = e;
          }
          if (!refused || refused.code !== -32602) {
            throw new Error(`bob's call: expected -32602, got ${refused?.code ?? 'a result'}`);
          }
        } finally {
          await bob.close();
        }
      }
    },
  },
  {
    name: 'without a token: 401 with a Bearer challenge; GET is 405 at the edge (no listChanged)',
    fn: async () => {
      const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' });
      const headers = { 'content-type': 'application/json', accept: 'application/json' };
      const res = await server.request('POST', '/mcp', { headers, body });
      if (res.status !== 401 || !/^Bearer /.test(res.headers['www-authenticate'] ?? '')) {
        throw new Error(`${res.status} ${res.headers['www-authenticate']}`);
      }
      // The agent opens its listen stream there (tests/integration/mcp_endpoint_notify.mjs).
      if (!edgeDir) return;
      const get = await server.request('GET', '/mcp', {
        headers: { authorization: `Bearer ${tokens.alice}`, accept: 'text/event-stream' } });
      if (get.status !== 405 || get.headers.allow !== 'POST') throw new Error(`GET: ${get.status}`);
    },
  },
];

async function main() {
  const started = Date.now();
  let failed = 0;
  try {
    const quiver = {
      caller_token_keys: { [KID]: { env: 'MCP_TEST_KEY' } },
      members: ['alice', 'bob'],
      grants: { alice: ['everything', 'memory'], bob: ['memory'] },
      runtime: { list_timeout_ms: 15000 },
    };
    if (edgeDir) {
      ({ redis, db } = await startEdgeRedis(NS, EDGE_REDIS_PASSWORD));
      quiver.namespace = NS;
      quiver.redis = `redis://127.0.0.1:${redis.port}/0`;
    }
    agent = await Agent.start({
      binary, logs,
      env: { MCP_TEST_KEY: KEY },
      config: {
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
        },
        quiver,
      },
    });
    server = agent;
    if (edgeDir) {
      const env = edgeEnv({ ns: NS, kid: KID, secret: KEY, redisPort: redis.port,
                            edgeRedisPassword: EDGE_REDIS_PASSWORD, l1TtlMs: 500 });
      edges.push(...await startEdges(1, { edgeDir, env, logs }));
      server = edges[0];
    }
    tokens.alice = agent.token('alice');
    tokens.bob = agent.token('bob');
    await waitForFresh(server, tokens.alice, 2);
    failed += await runTests(tests, argValue('--only', ''));
  } finally {
    db?.close();
    for (const w of edges) await w.stop();
    await agent?.stop();
    await redis?.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
  finish({ failed, count: tests.length, started, logs, secrets: [KEY, EDGE_REDIS_PASSWORD] });
}

main().catch(crashed(logs));
