// What the edge benchmarks (bench/edge.mjs, bench/mcp.mjs) share: a redis-server holding one
// member's data, and quiver-edge in two workerd processes, one with a long L1 TTL (answers from
// the isolate) and one with L1 off (every request goes to Redis). Two members:
//   everything  one shared connection, the tools server-everything lists, one of them disabled
//   realistic   10 shared connections, each manifest about 20 KB (8 tools of ~2.4 KB; 80 tools
//               in all, so one /mcp tools/list page of 100 holds them)
import {
  Layout, RedisServer, Workerd, connectionCommands, everythingTools, manifestCommands,
  manifestJson, mintToken,
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
