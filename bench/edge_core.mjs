// The edge core's own time per request, in V8 (node), without workerd, sockets or Redis waits:
//
//   node bench/edge_core.mjs [--member everything|realistic] [--n 3000] [--check 600000]
//                            [--edge-dir build/wasm/edge]
//
// The staged wasm module (build/wasm/edge) is instantiated in node as worker.mjs instantiates it,
// configured with the L1 off (QUIVER_L1_TTL_MS=0) and conditional reads on (--check: the
// QUIVER_L1_VALIDATE_MAX_AGE_MS; 0 for full reads), against a redis-server holding the member of
// bench/edge_fixture.mjs. A few real requests go through it (their Redis bytes over a loopback
// socket); the replies of the last are then fed back `--n` times per repetition: begin (the
// request's wire bytes), feed (the recorded reply), end, as the host calls them. Prints the best
// of five repetitions per request, and of `begin` alone (token, L1 lookups, the command). What it
// leaves out (workerd's HTTP, the JS host, sockets, Redis) is what bench/edge.mjs adds.
// The figures move with the machine's load: compare builds in one run, alternately.
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import { Layout, RedisServer, argValue, mintToken, repoRoot } from '../tests/edge/harness.mjs';
import { KID, MEMBER, NS, PASSWORD, SECRET, memberCommands } from './edge_fixture.mjs';

const dir = path.resolve(argValue('--edge-dir', path.join(repoRoot, 'build', 'wasm', 'edge')));
const member = argValue('--member', 'everything');
const iterations = Number(argValue('--n', '3000'));
const check = argValue('--check', '600000');
const PATHS = { everything: '/v1/mcp-connections/everything/manifest', realistic: '/v1/manifests' };

const { default: createQuiverEdge } = await import(path.join(dir, 'quiver-edge.mjs'));
const wasmModule = await WebAssembly.compile(readFileSync(path.join(dir, 'quiver-edge.wasm')));
const m = await createQuiverEdge({
  locateFile: (p) => p,
  instantiateWasm(imports, receive) {
    WebAssembly.instantiate(wasmModule, imports).then((i) => receive(i, wasmModule));
    return {};
  },
});
const encoder = new TextEncoder();
const decoder = new TextDecoder();
function withBytes(bytes, call) {
  const p = m._malloc(Math.max(1, bytes.length));
  try {
    m.HEAPU8.set(bytes, p);
    return call(p, bytes.length);
  } finally {
    m._free(p);
  }
}
// As worker.mjs reads a step (wasm-worker/exports.cpp: four u32s, the meta's and the payload's
// lengths and addresses).
function step(ptr) {
  const head = m.HEAPU32;
  const at = ptr >>> 2;
  const heap = m.HEAPU8;
  const s = JSON.parse(decoder.decode(heap.subarray(head[at + 2], head[at + 2] + head[at])));
  s.payload = heap.slice(head[at + 3], head[at + 3] + head[at + 1]);
  return s;
}

const redis = await RedisServer.start({ password: PASSWORD });
const db = await redis.client();
try {
  await db.pipeline(memberCommands(new Layout(NS), member));
  const env = {
    QUIVER_TOKEN_KEYS: JSON.stringify({ [KID]: SECRET }), QUIVER_NAMESPACE: NS,
    QUIVER_L1_TTL_MS: '0', QUIVER_L1_VALIDATE_MAX_AGE_MS: check,
    REDIS_PORT: String(redis.port), REDIS_PASSWORD: PASSWORD,
  };
  if (!withBytes(encoder.encode(JSON.stringify(env)), (p, n) => m._edge_init(p, n))) {
    throw new Error('edge_init refused the settings');
  }
  const token = mintToken({ member: MEMBER, kid: KID, secret: SECRET, ttlMs: 3600_000 });
  // The request as worker.mjs writes it (requestMeta, Edge.begin): as wrk sends it.
  const wireOf = (request) => {
    const meta = encoder.encode(JSON.stringify(request));
    const bytes = new Uint8Array(4 + meta.length);
    new DataView(bytes.buffer).setUint32(0, meta.length, true);
    bytes.set(meta, 4);
    return bytes;
  };
  const wire = wireOf({
    method: 'GET', path: PATHS[member], query: '',
    headers: [['authorization', `Bearer ${token}`], ['host', '127.0.0.1'], ['user-agent', 'wrk']],
  });
  const random = new Uint8Array(48).fill(7);
  const begin = (bytes = wire) => withBytes(random, (rp, rn) =>
    withBytes(bytes, (p, n) => step(m._edge_begin(p, n, Date.now(), rp, rn))));
  const feed = (h, b) => withBytes(b, (p, n) => step(m._edge_feed(h, p, n, Date.now())));

  // One request against the real Redis; the bytes of each round's reply.
  async function real() {
    let s = begin();
    const replies = [];
    let socket = null;
    while (s.action === 'redis') {
      if (s.new_connection || !socket) {
        socket?.destroy();
        socket = net.connect(redis.port, '127.0.0.1');
        await new Promise((resolve) => socket.once('connect', resolve));
      }
      socket.write(s.payload);
      const chunks = [];
      do {
        const chunk = await new Promise((resolve) => socket.once('data', resolve));
        chunks.push(chunk);
        s = feed(s.handle, chunk);
      } while (s.action === 'read');
      replies.push(Buffer.concat(chunks));
    }
    socket?.destroy();
    if (!s.ended) m._edge_end(s.handle);
    return { s, replies };
  }
  for (let i = 0; i < 3; i++) await real();
  const { s: last, replies } = await real();
  const source = last.headers['X-Quiver-Cache'];
  if (last.status !== 200) throw new Error(`the edge answered ${last.status}`);

  const once = () => {
    let s = begin();
    let i = 0;
    while (s.action === 'redis') s = feed(s.handle, replies[i++]);
    if (s.action !== 'respond' || s.status !== 200) throw new Error(JSON.stringify(s));
    if (!s.ended) m._edge_end(s.handle);
  };
  const best = (run) => {
    let out = Infinity;
    for (let rep = 0; rep < 5; rep++) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < iterations; i++) run();
      out = Math.min(out, Number(process.hrtime.bigint() - t0) / 1000 / iterations);
    }
    return out;
  };
  for (let i = 0; i < 500; i++) once();
  const whole = best(once);
  const beginOnly = best(() => m._edge_end(begin().handle));
  // How the revalidated answers were made: spliced from the last render (builds that splice say
  // so in /healthz), or rendered.
  const h = begin(wireOf({ method: 'GET', path: '/healthz', query: '', headers: [] }));
  m._edge_end(h.handle);
  const l1 = JSON.parse(decoder.decode(h.payload)).l1 ?? {};
  const made = l1.revalidated_spliced === undefined ? 'rendered'
    : `${l1.revalidated_spliced} of ${l1.revalidated} spliced`;
  console.log(`${member} (${source}, ${last.payload.length} bytes, ${replies.length} round(s), ` +
              `${made}): core ${whole.toFixed(1)} us per request, begin alone ` +
              `${beginOnly.toFixed(1)} us`);
} finally {
  db.close();
  await redis.stop();
}
