// Upstream load during stale reads: what 1,000 concurrent reads of a stale manifest cost the
// upstream MCP server, through the whole chain, against listing live.
//
//   node bench/upstream_load.mjs [--reads 1000] [--rounds 3] [--delay-ms 200]
//                                [--edge-dir build/wasm/edge] [--agent .../quiver-agent]
//                                [--write docs/benchmarks.md]
//
// One upstream for both: tests/peers/test-upstream.mjs over Streamable HTTP, whose tools/list
// answers after --delay-ms and which counts every request it answers (GET /control/stats).
//   quiver     upstream → quiver-agent serve (Redis store, fresh TTL 2 s) → redis-server →
//              two workerd processes serving quiver-edge. Once the manifest is stale (and
//              nothing is queued), `reads` concurrent GET /v1/mcp-connections/upstream/manifest,
//              spread over both edges and 10 members. Stale-while-revalidate: every read is
//              answered from the cache; the first queues one revalidation, the agent lists the
//              upstream once.
//   live       what a reader without a cache does: `reads` concurrent tools/list calls to the
//              same upstream through the official MCP SDK client, on one already initialized
//              Streamable HTTP session (the cheapest way to list live: no connection set-up or
//              initialize per read is counted against it).
// Each round reports the tools/list calls the upstream saw, the agent's refreshes, p50/p99 of
// the reads and the wall time of the burst.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { Agent, HttpUpstream, defaultAgentBinary, nodeModules } from '../tests/edge/agent.mjs';
import {
  Layout, RedisServer, Workerd, argValue, edgeDirArg, mintToken, repoRoot, sleep,
} from '../tests/edge/harness.mjs';

const arg = argValue;
const READS = Number(arg('--reads', '1000'));
const ROUNDS = Number(arg('--rounds', '3'));
const DELAY_MS = Number(arg('--delay-ms', '200'));
const edgeDir = edgeDirArg();
const agentBinary = path.resolve(arg('--agent', defaultAgentBinary()));
const writeTo = arg('--write', '');

const NS = 'load';
const KID = 'load-1';
const SECRET = 'upstream-load-benchmark-secret-0123456789';
const PASSWORD = 'upstream-load-redis-password';
const FRESH_TTL_MS = 2000;
const WINDOW_MS = 5000;  // QUIVER_REVALIDATE_WINDOW_MS
const MEMBERS = Array.from({ length: 10 }, (_, i) => `m${i}`);
const CID = 'upstream';
const layout = new Layout(NS);

// How many more tools/list calls listing live costs than the cache (medians of the rounds).
const callRatio = ({ quiver, live }) => median(live.calls) / Math.max(1, median(quiver.calls));
const quantile = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function until(what, probe, timeoutMs = 30000) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await probe()) return;
    await sleep(25);
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`);
}

async function upstreamCalls(upstream) {
  const res = await fetch(`${upstream.control}/stats`);
  return (await res.json()).tools_list_calls;
}

async function streamEntriesAdded(db) {
  if (!await db.call('EXISTS', layout.revalidate())) return 0;
  const info = await db.call('XINFO', 'STREAM', layout.revalidate());
  return info[info.indexOf('entries-added') + 1];
}

// Stale as the edge sees it, and nothing in flight: no lease, no gate, the stream drained.
async function staleAndIdle(db, edges) {
  await until('the manifest turns stale and idle', async () => {
    const freshUntil = Number(await db.call('HGET', layout.manifest(CID, 'shared'), 'fresh_until'));
    if (!freshUntil || Date.now() < freshUntil + 100) return false;
    if (await db.call('EXISTS', layout.gate(CID, 'shared'))) return false;
    if (await db.call('EXISTS', layout.lease(CID, 'shared'))) return false;
    for (const w of edges) {
      if ((await w.request('GET', '/healthz')).json?.open_requests !== 0) return false;
    }
    const groups = await db.call('XINFO', 'GROUPS', layout.revalidate()).catch(() => []);
    return groups.every((g) => g[g.indexOf('pending') + 1] === 0);
  });
}

async function committedRefreshes(agent) {
  return (await agent.metrics())['quiver_refreshes_total{outcome="committed"}'] ?? 0;
}

async function quiverRound(db, agent, edges, upstream, tokens) {
  await staleAndIdle(db, edges);
  const calls0 = await upstreamCalls(upstream);
  const refreshes0 = await committedRefreshes(agent);
  const queued0 = await streamEntriesAdded(db);
  const fetched0 = Number(await db.call('HGET', layout.manifest(CID, 'shared'), 'fetched_at'));
  const conns = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  const latencies = [];
  const statuses = {};
  const sources = {};
  let errors = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: READS }, async (_, i) => {
    const s = performance.now();
    const res = await edges[i % edges.length].request(
      'GET', `/v1/mcp-connections/${CID}/manifest`,
      { headers: { authorization: `Bearer ${tokens[i % tokens.length]}` }, agent: conns });
    latencies.push(performance.now() - s);
    const entry = res.json?.connections?.[0] ?? res.json;
    if (res.status !== 200 || !entry?.manifest?.tools?.items?.length) errors++;
    statuses[entry?.status] = (statuses[entry?.status] ?? 0) + 1;
    sources[res.headers['x-quiver-cache']] = (sources[res.headers['x-quiver-cache']] ?? 0) + 1;
  }));
  const wall = performance.now() - t0;
  conns.destroy();
  // Settle: the revalidation is committed and nothing else is queued or running.
  await until('the agent commits the revalidation', async () =>
    Number(await db.call('HGET', layout.manifest(CID, 'shared'), 'fetched_at')) > fetched0);
  await until('settled', async () => {
    if (await db.call('EXISTS', layout.lease(CID, 'shared'))) return false;
    const groups = await db.call('XINFO', 'GROUPS', layout.revalidate());
    return groups.every((g) => g[g.indexOf('pending') + 1] === 0);
  });
  await sleep(500);  // a second listing, if there were one, would have started by now
  latencies.sort((a, b) => a - b);
  return {
    calls: (await upstreamCalls(upstream)) - calls0,
    refreshes: (await committedRefreshes(agent)) - refreshes0,
    queued: (await streamEntriesAdded(db)) - queued0,
    p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99), wall, errors, statuses,
    sources,
  };
}

async function liveRound(client, upstream) {
  const calls0 = await upstreamCalls(upstream);
  const latencies = [];
  let errors = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: READS }, async () => {
    const s = performance.now();
    try {
      const r = await client.listTools(undefined, { timeout: 120000 });
      if (!r.tools.length) errors++;
    } catch {
      errors++;
    }
    latencies.push(performance.now() - s);
  }));
  const wall = performance.now() - t0;
  latencies.sort((a, b) => a - b);
  return { calls: (await upstreamCalls(upstream)) - calls0, refreshes: 0, queued: 0,
           p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99), wall, errors };
}

async function main() {
  if (!existsSync(agentBinary)) {
    console.error(`bench/upstream_load.mjs needs the native quiver-agent (${agentBinary})`);
    process.exit(2);
  }
  // The SDK's transport adds an abort listener per request in flight to one signal: with 1,000
  // in flight node warns of a leak. Other warnings are still printed.
  process.removeAllListeners('warning');
  process.on('warning', (w) => {
    if (w.name !== 'MaxListenersExceededWarning') console.warn(`${w.name}: ${w.message}`);
  });
  const sdk = path.join(nodeModules(), '@modelcontextprotocol', 'sdk', 'dist', 'esm', 'client');
  const { Client } = await import(pathToFileURL(path.join(sdk, 'index.js')));
  const { StreamableHTTPClientTransport } =
    await import(pathToFileURL(path.join(sdk, 'streamableHttp.js')));

  const logs = [];
  const stops = [];
  try {
    const redis = await RedisServer.start({ password: PASSWORD });
    stops.push(() => redis.stop());
    const db = await redis.client();
    stops.push(async () => db.close());
    const upstream = await HttpUpstream.start(['--tools', '20', '--delay-ms', String(DELAY_MS)],
                                              { logs });
    stops.push(() => upstream.stop());
    const agent = await Agent.start({
      binary: agentBinary, logs, env: { LOAD_REDIS_PASSWORD: PASSWORD, LOAD_TOKEN_KEY: SECRET },
      config: {
        mcpServers: { [CID]: { type: 'http', url: upstream.url } },
        quiver: {
          namespace: NS,
          redis: `redis://:\${LOAD_REDIS_PASSWORD}@127.0.0.1:${redis.port}/0`,
          allow_private_upstreams: true,
          runtime: { fresh_ttl_ms: FRESH_TTL_MS, maintenance_interval_ms: 3600000 },
          caller_token_keys: { [KID]: { env: 'LOAD_TOKEN_KEY' } },
          members: MEMBERS,
          grants: { '*': [CID] },
        },
      } });
    stops.push(() => agent.stop());
    const env = {
      QUIVER_TOKEN_KEYS: JSON.stringify({ [KID]: SECRET }), QUIVER_NAMESPACE: NS,
      QUIVER_FRESH_TTL_MS: String(FRESH_TTL_MS), QUIVER_REVALIDATE_WINDOW_MS: String(WINDOW_MS),
      REDIS_PORT: String(redis.port), REDIS_PASSWORD: PASSWORD,
    };
    const edges = [];
    for (let i = 0; i < 2; i++) {
      const w = await Workerd.start({ config: path.join(edgeDir, 'workerd.capnp'), env, logs });
      edges.push(w);
      stops.push(() => w.stop());
    }
    const tokens = MEMBERS.map((member) => mintToken({ member, kid: KID, secret: SECRET }));
    await until('the first listing', async () =>
      await db.call('HGET', layout.manifest(CID, 'shared'), 'fetched_at') !== null);

    const client = new Client({ name: 'quiver-upstream-load-bench', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(upstream.url)));
    stops.push(() => client.close());

    const quiver = [];
    const live = [];
    for (let r = 0; r < ROUNDS; r++) {
      const q = await quiverRound(db, agent, edges, upstream, tokens);
      quiver.push(q);
      console.log(`round ${r + 1} quiver: upstream tools/list ${q.calls}, agent refreshes ` +
                  `${q.refreshes}, queued ${q.queued}, p50 ${q.p50.toFixed(1)} ms, p99 ` +
                  `${q.p99.toFixed(1)} ms, wall ${q.wall.toFixed(0)} ms, errors ${q.errors}, ` +
                  `status ${JSON.stringify(q.statuses)}, from ${JSON.stringify(q.sources)}`);
      const l = await liveRound(client, upstream);
      live.push(l);
      console.log(`round ${r + 1} live:   upstream tools/list ${l.calls}, p50 ` +
                  `${l.p50.toFixed(1)} ms, p99 ${l.p99.toFixed(1)} ms, ` +
                  `wall ${l.wall.toFixed(0)} ms, errors ${l.errors}`);
    }
    const sum = (rows) => ({
      calls: rows.map((x) => x.calls), refreshes: rows.map((x) => x.refreshes),
      p50: median(rows.map((x) => x.p50)), p99: median(rows.map((x) => x.p99)),
      wall: median(rows.map((x) => x.wall)), errors: rows.reduce((n, x) => n + x.errors, 0),
    });
    const result = { quiver: sum(quiver), live: sum(live), rounds: quiver };
    console.log(`ratios (live / quiver, medians): tools/list ${callRatio(result).toFixed(0)}×, ` +
                `p50 ${(result.live.p50 / result.quiver.p50).toFixed(2)}×, ` +
                `p99 ${(result.live.p99 / result.quiver.p99).toFixed(2)}×, ` +
                `wall ${(result.live.wall / result.quiver.wall).toFixed(2)}×`);
    if (writeTo) writeSection(writeTo, result);
  } finally {
    for (const stop of stops.reverse()) await stop();
  }
  const bad = logs.filter((l) => /INTERNAL|exception|Uncaught/i.test(l));
  if (bad.length) console.error(`logged errors:\n${bad.slice(0, 10).join('\n')}`);
}

function writeSection(file, { quiver, live, rounds }) {
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  const workerdVersion = execFileSync(
    path.join(repoRoot, 'build', 'node', 'node_modules', '.bin', 'workerd'), ['--version'],
    { encoding: 'utf8' }).trim();
  const calls = (xs) => xs.join(' / ');
  const ms = (x) => x.toFixed(1);
  const stale = rounds.map((r) => r.statuses.stale ?? 0);
  const l1 = rounds.map((r) => `${r.sources.hit ?? 0}/${r.sources.miss ?? 0}`);
  const heading = '### Upstream load during stale reads';
  const lines = [
    heading,
    '',
    `\`node bench/upstream_load.mjs --reads ${READS} --rounds ${ROUNDS} ` +
    `--delay-ms ${DELAY_MS}\`, ${new Date().toISOString().slice(0, 10)}:`,
    `${os.cpus().length} × ${cpu}, ${workerdVersion}, node ${process.version}, everything on ` +
    'loopback on this machine.',
    'One upstream, `tests/peers/test-upstream.mjs` over Streamable HTTP (20 tools, every list',
    `answered after ${DELAY_MS} ms), counting the tools/list calls it answers. **quiver**: the`,
    'real chain, upstream → `quiver-agent` (Redis store, fresh TTL 2 s) → redis-server → two',
    `workerd processes serving quiver-edge; once the manifest is stale, ${READS} concurrent`,
    '`GET /v1/mcp-connections/upstream/manifest` over both edges and 10 members (new connection',
    'each). **live**: what a reader without a cache does, the same number of concurrent',
    '`tools/list` calls to the same upstream through the official MCP SDK client on one',
    'initialized Streamable HTTP session (no set-up per read counted against it). Per round;',
    `latencies and wall time are the medians of ${ROUNDS} rounds.`,
    '',
    '| reads | tools/list seen by the upstream | agent refreshes | p50 ms | p99 ms | wall ms |',
    '| --- | ---: | ---: | ---: | ---: | ---: |',
    `| quiver (stale-while-revalidate) | ${calls(quiver.calls)} | ${calls(quiver.refreshes)} | ` +
    `${ms(quiver.p50)} | ${ms(quiver.p99)} | ${quiver.wall.toFixed(0)} |`,
    `| live tools/list | ${calls(live.calls)} | — | ${ms(live.p50)} | ${ms(live.p99)} | ` +
    `${live.wall.toFixed(0)} |`,
    `| live / quiver | ${callRatio({ quiver, live }).toFixed(0)} × | | ` +
    `${(live.p50 / quiver.p50).toFixed(2)} × | ${(live.p99 / quiver.p99).toFixed(2)} × | ` +
    `${(live.wall / quiver.wall).toFixed(2)} × |`,
    '',
    `Reads answered \`stale\` per round: ${stale.join(' / ')} of ${READS}` +
    `${stale.every((n) => n === READS) ? '' : ' (the others after the revalidation committed)'}.`,
    `Answered from the edge's L1 / from Redis: ${l1.join(', ')}.`,
    `Errors: ${quiver.errors} (quiver), ${live.errors} (live).`,
    '',
    '- **The upstream** sees one `tools/list` per stale key per revalidation window, whatever the',
    '  number of readers: the first stale read queues one revalidation (the Redis gate lets one',
    '  through per key, across both edges), the agent lists once under its lease, and every read',
    '  is answered from the cache meanwhile. Listing live costs one call per read.',
    `- **Latency** here is queueing: ${READS} requests arrive at once on ${os.cpus().length} ` +
    'cores shared by',
    '  the client, both workerd processes, Redis, the agent and the upstream. A stale read never',
    `  waits for the upstream; a live read waits for its ${DELAY_MS} ms list and for the upstream`,
    `  to work through the other ${READS - 1}. Compare the rows of one run, not across runs.`,
    '',
  ];
  let text = readFileSync(file, 'utf8');
  const edge = text.indexOf('## Edge\n');
  if (edge < 0) throw new Error(`${file} has no "## Edge" section (run bench/edge.mjs first)`);
  let end = text.indexOf('\n## ', edge + 1);
  end = end < 0 ? text.length : end + 1;
  const at = text.indexOf(`${heading}\n`, edge);
  const section = lines.join('\n');
  // Replaces this subsection (up to the next heading), or appends it to the Edge section.
  if (at >= 0 && at < end) {
    let next = text.indexOf('\n### ', at + 1);
    next = next < 0 || next >= end ? end : next + 1;
    text = text.slice(0, at) + section + (next < text.length ? '\n' : '') + text.slice(next);
  } else {
    const before = text.slice(0, end).trimEnd();
    text = `${before}\n\n${section}${end < text.length ? '\n' : ''}${text.slice(end)}`;
  }
  writeFileSync(file, text);
  console.log(`wrote "${heading}" into the Edge section of ${file}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
