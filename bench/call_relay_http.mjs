#!/usr/bin/env node
// Benchmark (not a test): `tools/call echo` on server-everything, end to end over HTTP, three ways
// side by side in one run, round robin (one call of each way per round, so load and machine noise
// hit all three alike):
//   direct  the official SDK client (1.x) on server-everything over stdio: the upstream alone
//   agent   POST /mcp to `quiver-agent serve` (Redis store): the agent's endpoint, its call path,
//           its pooled upstream session
//   edge    POST /mcp to quiver-edge in workerd: its snapshot read (grant, preference), the Redis
//           relay (call_enqueue.lua + BLPOP on a connection of its own), an agent relay worker
//           performing the call on the same pooled session, the reply back through Redis
// Prints p50 / p99 of each and the hop each adds (agent − direct, edge − agent).
//
//   node bench/call_relay_http.mjs [--n 500] [--warmup 50] [--edge-dir build/wasm/edge]
//                                  [--agent build/native/native-agent/quiver-agent]
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { Agent, agentBinaryOrSkip, nodeModules } from '../tests/edge/agent.mjs';
import {
  argValue, edgeDirArg, edgeEnv, startEdgeRedis, startEdges, waitFor,
} from '../tests/edge/harness.mjs';

const n = Number(argValue('--n', '500'));
const warmup = Number(argValue('--warmup', '50'));
const binary = agentBinaryOrSkip();
const edgeDir = edgeDirArg();
const nm = nodeModules();
const everything = path.join(nm, '@modelcontextprotocol/server-everything/dist/index.js');
const NS = 'benchrelay';
const KID = 'k1';
const KEY = 'call-relay-bench-caller-token-key-0123';
const EDGE_REDIS_PASSWORD = 'call-relay-bench-edge-password';

const mod = (p) => import(pathToFileURL(path.join(nm, p)).href);

function pct(samples, p) {
  const s = [...samples].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN;
}

async function main() {
  const logs = [];
  const sdk = await mod('@modelcontextprotocol/sdk/dist/esm/client/index.js');
  const stdio = await mod('@modelcontextprotocol/sdk/dist/esm/client/stdio.js');
  const { redis, db } = await startEdgeRedis(NS, EDGE_REDIS_PASSWORD);
  let agent;
  let edge;
  let direct;
  try {
    agent = await Agent.start({
      binary, logs, logLevel: 'warn',
      env: { BENCH_KEY: KEY },
      config: {
        mcpServers: { everything: { command: process.execPath, args: [everything, 'stdio'] } },
        quiver: {
          namespace: NS,
          redis: `redis://127.0.0.1:${redis.port}/0`,
          caller_token_keys: { [KID]: { env: 'BENCH_KEY' } },
          members: ['alice'],
          grants: { alice: ['everything'] },
          runtime: { list_timeout_ms: 30000, request_timeout_ms: 30000 },
        },
      },
    });
    [edge] = await startEdges(1, {
      edgeDir, logs,
      env: edgeEnv({ ns: NS, kid: KID, secret: KEY, redisPort: redis.port,
                     edgeRedisPassword: EDGE_REDIS_PASSWORD, l1TtlMs: 2000 }),
    });
    const token = agent.token('alice');
    await waitFor('everything listed', async () => {
      const res = await edge.request('GET', '/v1/manifests',
                                     { headers: { authorization: `Bearer ${token}` } });
      return res.status === 200 && res.json.connections[0]?.status === 'fresh';
    }, 60000);

    direct = new sdk.Client({ name: 'bench', version: '1.0.0' });
    await direct.connect(new stdio.StdioClientTransport({ command: process.execPath,
                                                          args: [everything, 'stdio'],
                                                          stderr: 'ignore' }));
    const message = { message: 'bench' };
    let id = 0;
    const post = (server) => async () => {
      const res = await server.request('POST', '/mcp', {
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json',
                   accept: 'application/json, text/event-stream',
                   'mcp-protocol-version': '2025-06-18' },
        body: JSON.stringify({ jsonrpc: '2.0', id: ++id, method: 'tools/call',
                               params: { name: 'everything__echo', arguments: message } }),
      });
      return res.status === 200 && res.json?.result?.content?.[0]?.text?.includes('bench');
    };
    const ways = [
      { name: 'direct', one: async () => (await direct.callTool({ name: 'echo', arguments: message }))
        .content?.[0]?.text?.includes('bench'), us: [], failures: 0 },
      { name: 'agent', one: post(agent), us: [], failures: 0 },
      { name: 'edge', one: post(edge), us: [], failures: 0 },
    ];
    for (let i = 0; i < warmup; i++) for (const w of ways) await w.one();
    for (let i = 0; i < n; i++) {
      for (const w of ways) {
        const t = process.hrtime.bigint();
        const ok = await w.one();
        const us = Number(process.hrtime.bigint() - t) / 1000;
        if (ok) w.us.push(us); else w.failures++;
      }
    }
    const ms = (us) => (us / 1000).toFixed(3);
    console.log(`tools/call echo on server-everything over HTTP, ${n} calls each, round robin`);
    console.log(`${'way'.padEnd(8)} ${'p50 ms'.padStart(10)} ${'p99 ms'.padStart(10)} failures`);
    for (const w of ways) {
      console.log(`${w.name.padEnd(8)} ${ms(pct(w.us, 0.5)).padStart(10)} ` +
                  `${ms(pct(w.us, 0.99)).padStart(10)} ${String(w.failures).padStart(8)}`);
    }
    const [d, a, e] = ways;
    const hop = (x, y, what) => console.log(
      `added by ${what}: p50 ${ms(pct(x.us, 0.5) - pct(y.us, 0.5))} ms, ` +
      `p99 ${ms(pct(x.us, 0.99) - pct(y.us, 0.99))} ms (p50 ratio ${
        (pct(x.us, 0.5) / pct(y.us, 0.5)).toFixed(2)}x)`);
    hop(a, d, "the agent's /mcp (HTTP, endpoint, call path)");
    hop(e, a, "the edge's /mcp relay (workerd, Redis, agent worker)");
  } finally {
    await direct?.close();
    await edge?.stop();
    await agent?.stop();
    db.close();
    await redis.stop();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
