// What the edge benchmarks (bench/edge.mjs, bench/mcp.mjs) share: a redis-server holding one
// member's data, and quiver-edge in two workerd processes, one with a long L1 TTL (answers from
// the isolate) and one with L1 off (every request goes to Redis). Two members:
//   everything  one shared connection, the tools server-everything lists, one of them disabled
//   realistic   10 shared connections, each manifest about 20 KB (8 tools of ~2.4 KB; 80 tools
//               in all, so one /mcp tools/list page of 100 holds them)
import { copyFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import {
  Layout, RedisServer, Workerd, connectionCommands, everythingTools, manifestCommands,
  manifestJson, mintToken, repoRoot,
} from '../tests/edge/harness.mjs';

export const KID = 'bench';
export const SECRET = 'quiver-edge-benchmark-secret-0123456789';
export const PASSWORD = 'bench-redis-password';
export const NS = 'bench';
export const MEMBER = 'bench';

// Tools of about `bytes` bytes in all, `count` of them, told apart by `cid`.
function syntheticTools(cid, count, bytes) {
  const pad = Math.max(0, Math.floor(bytes / count) - 220);
  return Array.from({ length: count }, (_, i) => ({
    name: `${cid}_tool_${i}`,
    description: `Tool ${i} of ${cid}. ${'Lorem ipsum dolor sit amet. '.repeat(pad / 28 | 0)}`,
    inputSchema: { type: 'object', properties: { query: { type: 'string' } } },
  }));
}

// The Redis commands writing `member`'s connections, grants and manifests.
export function memberCommands(layout, member) {
  if (member === 'everything') {
    return [
      ...connectionCommands(layout, 'everything', 'shared'),
      ['SADD', layout.grants(MEMBER), 'everything'],
      ...manifestCommands(layout, 'everything', 'shared', manifestJson(everythingTools())),
      ['SADD', layout.disabled('everything', 'shared'), 'tool:echo'],
    ];
  }
  if (member !== 'realistic') throw new Error(`unknown member ${member}`);
  const out = [];
  for (let i = 0; i < 10; i++) {
    const cid = `conn${String(i).padStart(2, '0')}`;
    out.push(...connectionCommands(layout, cid, 'shared'),
             ['SADD', layout.grants(MEMBER), cid],
             ...manifestCommands(layout, cid, 'shared',
                                 manifestJson(syntheticTools(cid, 8, 20_000), cid)));
  }
  return out;
}

// Starts Redis and both edges for `member`; stop() ends them all.
export async function startEdgeFixture({ edgeDir, member, logs }) {
  const redis = await RedisServer.start({ password: PASSWORD });
  const db = await redis.client();
  const servers = [];
  const stop = async () => {
    db.close();
    for (const s of servers.reverse()) await s.stop();
    await redis.stop();
  };
  try {
    await db.pipeline(memberCommands(new Layout(NS), member));
    // `check`: QUIVER_L1_VALIDATE_MAX_AGE_MS (past the TTL, a conditional read of the copy kept).
    const edgeEnv = (ttl, check = 600_000) => ({
      QUIVER_TOKEN_KEYS: JSON.stringify({ [KID]: SECRET }), QUIVER_NAMESPACE: NS,
      QUIVER_L1_TTL_MS: String(ttl), QUIVER_L1_VALIDATE_MAX_AGE_MS: String(check),
      REDIS_PORT: String(redis.port), REDIS_PASSWORD: PASSWORD,
    });
    const config = `${edgeDir}/workerd.capnp`;
    const edgeL1 = await Workerd.start({ config, env: edgeEnv(600_000), logs });
    servers.push(edgeL1);
    const edgeRedis = await Workerd.start({ config, env: edgeEnv(0), logs });
    servers.push(edgeRedis);
    const edgeFull = await Workerd.start({ config, env: edgeEnv(0, 0), logs });
    servers.push(edgeFull);
    const token = mintToken({ member: MEMBER, kid: KID, secret: SECRET, ttlMs: 3600_000 });
    return { redis, db, edgeL1, edgeRedis, edgeFull, token, servers, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

// What each member's benchmarked request asks for.
export const PATHS = { everything: '/v1/mcp-connections/everything/manifest', realistic: '/v1/manifests' };
// The key the hand-written worker GETs: the bytes the edge answered for the member.
export const BODY_KEY = 'bench:body';

// The baselines for `body` (the bytes the edge answered), each worker in a workerd of its own.
export async function startBaselines(tmp, redisPort, body, logs) {
  for (const f of ['plain.mjs', 'redis-get.mjs']) {
    copyFileSync(path.join(repoRoot, 'bench', 'workers', f), path.join(tmp, f));
  }
  // A file, not the environment: the realistic member's ~200 KB is over one variable's limit.
  writeFileSync(path.join(tmp, 'body.json'), body);
  writeFileSync(path.join(tmp, 'baselines.capnp'), `\
using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "plain", worker = (modules = [(name = "plain.mjs", esModule = embed "plain.mjs")],
      compatibilityDate = "2024-09-23",
      bindings = [(name = "BODY", text = embed "body.json")])),
    (name = "redis-get", worker = (
      modules = [(name = "redis-get.mjs", esModule = embed "redis-get.mjs")],
      compatibilityDate = "2024-09-23", globalOutbound = "net",
      bindings = [(name = "REDIS_HOST", text = "127.0.0.1"),
                  (name = "REDIS_PORT", fromEnvironment = "REDIS_PORT"),
                  (name = "REDIS_PASSWORD", fromEnvironment = "REDIS_PASSWORD"),
                  (name = "KEY", text = "${BODY_KEY}")])),
    (name = "net", network = (allow = ["local"])),
  ],
  sockets = [
    (name = "http", address = "127.0.0.1:0", http = (), service = "plain"),
    (name = "redis", address = "127.0.0.1:0", http = (), service = "redis-get"),
  ],
);
`);
  const config = path.join(tmp, 'baselines.capnp');
  const env = { REDIS_PORT: String(redisPort), REDIS_PASSWORD: PASSWORD };
  const plain = await Workerd.start({ config, logs, env });
  // The same config again, serving the other socket: each baseline has a process to itself.
  const redisGet = await Workerd.start({ config, logs, socket: 'redis', env });
  return { plain, redisGet };
}

// The member's request at the fixture's L1 edge (200, or this throws), its answer stored under
// BODY_KEY, and both baselines started (added to fx.servers) and checked to answer the same bytes.
export async function startMemberBaselines(fx, member, tmp, logs) {
  const target = PATHS[member];
  const headers = { Authorization: `Bearer ${fx.token}` };
  const sample = await fx.edgeL1.request('GET', target, { headers });
  if (sample.status !== 200) throw new Error(`edge answered ${sample.status}: ${sample.text}`);
  await fx.db.call('SET', BODY_KEY, sample.text);
  const { plain, redisGet } = await startBaselines(tmp, fx.redis.port, sample.text, logs);
  fx.servers.push(plain, redisGet);
  const check = await redisGet.request('GET', target);
  if (check.text !== sample.text) throw new Error(`the Redis GET baseline answered ${check.status}`);
  return { target, headers, sample, plain, redisGet };
}
