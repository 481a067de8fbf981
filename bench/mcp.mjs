// Issue 13's list benchmark: `tools/list` through the edge's `POST /mcp` against
// `GET /v1/manifests` for the same member, same manifests, same workerd processes and the same
// Redis, side by side in one run, with wrk.
//
//   node bench/mcp.mjs [--duration 5] [--members everything,realistic] [--edge-dir build/wasm/edge]
//
// Members (bench/edge_fixture.mjs): `everything` (one connection, the tools server-everything
// lists, one disabled) and `realistic` (10 connections, ~20 KB manifests, 80 tools: one /mcp
// page). For each, both edges (L1 on: the caller's store read kept in the isolate; L1 off: a Redis
// round trip per request), at 1 and 16 keep-alive connections, each pair run ABBA: p50 / p99
// latency and requests/s, and the ratios /mcp ÷ /v1/manifests (the issue's goal: within 1.3×). The /mcp request is
// stateless (2025-11-25, no initialize: shared/mcp_endpoint.h); each answer is checked once
// before the runs (every visible tool listed, none missing).
// Needs wrk (Debian package `wrk`), redis-server and the npm workerd (scripts/setup.sh).
import { argValue, edgeDirArg } from '../tests/edge/harness.mjs';
import { startEdgeFixture } from './edge_fixture.mjs';
import { hasWrk, machineLine, printRow, wrk, wrkVersion } from './report.mjs';

const duration = Number(argValue('--duration', '5'));
const members = argValue('--members', 'everything,realistic').split(',');
const edgeDir = edgeDirArg();

const LIST_BODY = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} });

if (!hasWrk()) {
  console.error('bench/mcp.mjs needs wrk: scripts/setup.sh --bench');
  process.exit(2);
}

// The tools of a GET /v1/manifests answer that /mcp should list (visible, of servable entries).
function manifestToolCount(json) {
  let n = 0;
  for (const c of json.connections ?? []) n += c.manifest?.tools?.items?.length ?? 0;
  return n;
}

// The mean of two wrk results (latencies, requests/s; errors summed).
function meanOf(a, b) {
  const out = { ...a };
  for (const k of ['p50', 'p99', 'max', 'rps']) out[k] = (a[k] + b[k]) / 2;
  out.errors = a.errors + b.errors;
  return out;
}

async function runMember(member, logs) {
  const fx = await startEdgeFixture({ edgeDir, member, logs });
  const rows = [];
  try {
    const auth = { Authorization: `Bearer ${fx.token}` };
    const mcpHeaders = { ...auth, 'Content-Type': 'application/json',
                         Accept: 'application/json, text/event-stream',
                         'MCP-Protocol-Version': '2025-11-25' };
    const rest = await fx.edgeRedis.request('GET', '/v1/manifests', { headers: auth });
    const mcp = await fx.edgeRedis.request('POST', '/mcp', { headers: mcpHeaders, body: LIST_BODY });
    if (rest.status !== 200 || mcp.status !== 200) {
      throw new Error(`answers ${rest.status} / ${mcp.status}: ${rest.text.slice(0, 200)} ` +
                      `${mcp.text.slice(0, 200)}`);
    }
    const listed = mcp.json.result?.tools?.length ?? -1;
    const expected = manifestToolCount(rest.json);
    if (listed !== expected || mcp.json.result?.nextCursor) {
      throw new Error(`/mcp listed ${listed} tools (cursor ${mcp.json.result?.nextCursor}), ` +
                      `/v1/manifests shows ${expected}`);
    }
    const sizes = { rest: Buffer.byteLength(rest.text), mcp: Buffer.byteLength(mcp.text) };
    for (const [edgeName, edge] of [['L1 hit', fx.edgeL1], ['Redis hit (L1 off)', fx.edgeRedis]]) {
      for (const connections of [1, 16]) {
        // ABBA: REST, /mcp, /mcp, REST, so a load that drifts during the four runs weighs on
        // both alike; each row is the mean of its two runs.
        const rest = () => wrk({ port: edge.port, path: '/v1/manifests', connections, duration,
                                 headers: auth });
        const list = () => wrk({ port: edge.port, path: '/mcp', connections, duration,
                                 headers: mcpHeaders, method: 'POST', body: LIST_BODY });
        const r1 = rest();
        const m1 = list();
        const m = meanOf(m1, list());
        const r = meanOf(r1, rest());
        printRow(`${member}, ${edgeName}: GET /v1/manifests`, connections, r);
        printRow(`${member}, ${edgeName}: POST /mcp tools/list`, connections, m);
        rows.push({ member, edgeName, connections, rest: r, mcp: m, sizes, tools: listed });
      }
    }
  } finally {
    await fx.stop();
  }
  return rows;
}

async function main() {
  const logs = [];
  const rows = [];
  for (const member of members) rows.push(...await runMember(member, logs));
  const date = new Date().toISOString().slice(0, 16).replace('T', ' ');
  console.log(`\n\`node bench/mcp.mjs --duration ${duration} --members ${members.join(',')}\`, ` +
              `${date} UTC: ${machineLine()}, wrk ${wrkVersion()}.\n`);
  console.log('| member (tools; bytes REST / MCP) | edge | conns | REST p50 ms | /mcp p50 ms | ' +
              'REST p99 ms | /mcp p99 ms | REST req/s | /mcp req/s | /mcp ÷ REST p50 | p99 | ' +
              'req/s |');
  console.log('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const x of rows) {
    const errors = x.rest.errors + x.mcp.errors;
    console.log(`| ${x.member} (${x.tools}; ${x.sizes.rest} / ${x.sizes.mcp}) | ${x.edgeName} | ` +
                `${x.connections} | ${x.rest.p50.toFixed(3)} | ${x.mcp.p50.toFixed(3)} | ` +
                `${x.rest.p99.toFixed(3)} | ${x.mcp.p99.toFixed(3)} | ${x.rest.rps.toFixed(0)} | ` +
                `${x.mcp.rps.toFixed(0)} | ${(x.mcp.p50 / x.rest.p50).toFixed(2)} | ` +
                `${(x.mcp.p99 / x.rest.p99).toFixed(2)} | ${(x.rest.rps / x.mcp.rps).toFixed(2)} |` +
                `${errors ? ` (${errors} non-2xx)` : ''}`);
  }
  console.log('\nRatios above 1 mean /mcp is slower (for req/s: REST ÷ /mcp).');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
