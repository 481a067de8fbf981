// quiver-edge: the module worker. A thin host around the wasm core (shared/edge_service.h):
// it reads the request, hands bytes to the core, and carries out what the core asks for — write
// these bytes to Redis, read the reply, send this response, queue this in the background. Every
// decision (auth, routing, L1 cache, stale-while-revalidate, errors) is the core's.
//
// Platform rules this follows (workerd and Cloudflare Workers alike):
//  - the wasm is imported as a module and instantiated once per isolate; compiling wasm from
//    bytes at run time is refused. One instance serves every request: the core never waits.
//  - a socket belongs to its request: each request opens its own Redis connection (lazily, only
//    when the core asks for one) and closes it when it is done, background work included.
//  - time is Date.now() and randomness crypto.getRandomValues, passed into the core.
//  - a relayed /mcp call (shared/call_relay.h) is a Redis round the core marks `redis_blocks_ms`:
//    Redis holds its reply (a BLPOP) up to the call's deadline (QUIVER_CALL_TIMEOUT_MS), so that
//    round's reads wait that much longer than REDIS_TIMEOUT_MS. A client that goes away meanwhile
//    (request.signal, the `enable_request_signal` compatibility flag) stops the wait: the socket
//    is closed (the BLPOP with it) and the core's request ended, at once.
//  - when the core's step says `stream` (a client that accepts text/event-stream, about to wait
//    on a relay), the response starts at once with the step's status and headers, its body an
//    event stream: the step's `keepalive` comment is written every `keepalive_ms` while the
//    rounds go on, and the final respond step's payload (the answer's events) ends it. workerd
//    tells a request of a reset connection at once, but of a graceful close (FIN) only once a
//    response is streaming and a write to it fails; then the stream is cancelled and the signal
//    aborts: the client is gone, as for a reset (docs/design.md, "Calls through the agent").
//
// Environment (see deploy/workerd.capnp and deploy/wrangler.toml; the core's settings are listed
// in shared/edge_service.h):
//   REDIS_HOST (127.0.0.1), REDIS_PORT (6379), REDIS_TLS ("1"/"true"/"on": TLS),
//   REDIS_CONNECT_TIMEOUT_MS (1000), REDIS_TIMEOUT_MS (2000: each write and read).
//   On a Redis Cluster (REDIS_CLUSTER, read by the core: shared/routed_conversation.h) each
//   Redis step names its node (`node`), a backoff to wait first (`delay_ms`) and connections to
//   close (`close`); this host keeps one socket per node per request, six at most. A spread
//   round over several nodes (key layout v2) is one step in `parts`, one per node: every part
//   is written, then every part's socket is read concurrently and each part's bytes go back to
//   the core by its index (driveParts): a round over N nodes costs one round trip, not N.
import { connect } from 'cloudflare:sockets';

import createQuiverEdge from './quiver-edge.mjs';
import wasmModule from './quiver-edge.wasm';

// The random bytes each request gets from the CSPRNG (shared/edge_service.h begin): its id, and
// the seed of its relayed calls' rids.
const RANDOM_BYTES = 48;

// The largest request body read (the core's kMaxEdgeRequestBodyBytes): one byte more is read so
// that the core sees the body is too large and answers 413.
const MAX_BODY_BYTES = 64 * 1024;
// The most the Edge keeps allocated in wasm memory for the inputs it hands over (Edge.withBytes).
const SCRATCH_MAX_BYTES = 256 * 1024;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

// ---- the wasm core -----------------------------------------------------------------------------

class Edge {
  constructor(module) {
    this.m = module;
    this.scratch = 0;  // wasm memory the inputs are copied into (withBytes), kept between calls
    this.scratchSize = 0;
  }

  // `size` bytes of wasm memory for one call's inputs: the scratch buffer the instance keeps (no
  // malloc and free per call: each a call into wasm), grown as needed up to SCRATCH_MAX_BYTES; a
  // larger input gets memory of its own, which release() frees. The core copies what it keeps of
  // an input before returning, and nothing calls into the module meanwhile.
  reserve(size) {
    const m = this.m;
    if (size > SCRATCH_MAX_BYTES) {
      const ptr = m._malloc(size);
      if (!ptr) throw new Error('wasm malloc failed');
      return ptr;
    }
    if (size > this.scratchSize) {
      const grown = Math.max(size, Math.min(SCRATCH_MAX_BYTES, this.scratchSize * 2 || 16384));
      const ptr = m._malloc(grown);
      if (!ptr) throw new Error('wasm malloc failed');
      if (this.scratch) m._free(this.scratch);
      this.scratch = ptr;
      this.scratchSize = grown;
    }
    return this.scratch;
  }

  release(ptr) {
    if (ptr !== this.scratch) this.m._free(ptr);
  }

  // Copies `bytes` into wasm memory for the duration of `call(ptr, len)`.
  withBytes(bytes, call) {
    const ptr = this.reserve(Math.max(1, bytes.length));
    try {
      this.m.HEAPU8.set(bytes, ptr);
      return call(ptr, bytes.length);
    } finally {
      this.release(ptr);
    }
  }

  // A step: the call returned four u32s (exports.cpp: the meta JSON's length, the payload's
  // length, and where each lies in wasm memory), read into an object whose `payload` is a copy.
  // HEAPU8 is read after the call: memory may have grown during it.
  step(ptr) {
    if (!ptr) return null;
    const m = this.m;
    const head = m.HEAPU32;
    const at = ptr >>> 2;  // a static array of u32s: aligned
    const metaAt = head[at + 2];
    const payloadAt = head[at + 3];
    const heap = m.HEAPU8;
    const step = JSON.parse(decoder.decode(heap.subarray(metaAt, metaAt + head[at])));
    step.payload = heap.slice(payloadAt, payloadAt + head[at + 1]);
    return step;
  }

  init(env) {
    const vars = {};
    for (const [name, value] of Object.entries(env)) {
      if (typeof value === 'string') vars[name] = value;
    }
    return this.withBytes(encoder.encode(JSON.stringify(vars)), (p, n) => this.m._edge_init(p, n));
  }

  // The request, written straight into wasm memory in its wire format (shared/edge_service.h: u32
  // meta length, meta JSON, body), and RANDOM_BYTES random bytes after it, drawn in place (no
  // buffer of their own).
  begin(meta, body) {
    const m = this.m;
    // UTF-16 code units → at most 3 UTF-8 bytes each.
    const ptr = this.reserve(4 + meta.length * 3 + body.length + RANDOM_BYTES);
    try {
      const heap = m.HEAPU8;
      const metaBytes = encoder.encodeInto(meta, heap.subarray(ptr + 4, ptr + 4 + meta.length * 3))
        .written;
      m.HEAPU32[ptr >>> 2] = metaBytes;  // malloc'd: aligned; wasm is little-endian
      const wireLength = 4 + metaBytes + body.length;
      heap.set(body, ptr + 4 + metaBytes);
      crypto.getRandomValues(heap.subarray(ptr + wireLength, ptr + wireLength + RANDOM_BYTES));
      return this.step(m._edge_begin(ptr, wireLength, Date.now(), ptr + wireLength,
                                     RANDOM_BYTES));
    } finally {
      this.release(ptr);
    }
  }

  feed(handle, bytes) {
    return this.withBytes(bytes, (p, n) => this.step(this.m._edge_feed(handle, p, n, Date.now())));
  }

  fail(handle, why) {
    return this.withBytes(encoder.encode(why), (p, n) =>
      this.step(this.m._edge_fail(handle, p, n, Date.now())));
  }

  // A step in parts: part `part`'s bytes, or its connection's failure.
  feedPart(handle, part, bytes) {
    return this.withBytes(bytes, (p, n) =>
      this.step(this.m._edge_feed_part(handle, part, p, n, Date.now())));
  }

  failPart(handle, part, why) {
    return this.withBytes(encoder.encode(why), (p, n) =>
      this.step(this.m._edge_fail_part(handle, part, p, n, Date.now())));
  }

  background(handle) {
    return this.step(this.m._edge_background(handle, Date.now()));
  }

  end(handle) {
    if (handle) this.m._edge_end(handle);
  }

  abandon(handle) {
    return this.step(this.m._edge_abandon(handle, Date.now()));
  }
}

let edgePromise = null; // one instance per isolate

async function instantiate(env) {
  // Emscripten's factory promise never settles when a custom instantiateWasm fails: the failure
  // is raced in here, so a module that cannot be instantiated rejects instead of hanging every
  // request of the isolate.
  let fail;
  const failed = new Promise((_, reject) => { fail = reject; });
  const module = await Promise.race([failed, createQuiverEdge({
    locateFile: (path) => path,
    onAbort: (what) => fail(new Error(`aborted: ${what}`)),
    instantiateWasm(imports, receive) {
      WebAssembly.instantiate(wasmModule, imports).then((instance) => {
        try {
          receive(instance, wasmModule);
        } catch (e) {
          fail(e);
        }
      }, fail);
      return {};
    },
  })]);
  const edge = new Edge(module);
  if (!edge.init(env)) console.error('quiver-edge: misconfigured; GET /healthz says why');
  return edge;
}

function getEdge(env) {
  if (!edgePromise) {
    edgePromise = instantiate(env).catch((e) => {
      edgePromise = null; // try again with the next request
      throw e;
    });
  }
  return edgePromise;
}

// ---- Redis over cloudflare:sockets -------------------------------------------------------------

// `promise`, or a rejection once `ms` passed first (acceptsTcp's probe).
function withTimeout(promise, ms, what) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
    promise.then((value) => {
      clearTimeout(timer);
      resolve(value);
    }, (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

function intVar(value, fallback) {
  const n = Number.parseInt(value ?? '', 10);
  return Number.isFinite(n) && n > 0 ? n : fallback;
}

// Whether `hostname:port` accepts a plain TCP connection (closed at once, nothing written).
async function acceptsTcp(hostname, port, ms) {
  let probe;
  try {
    probe = connect({ hostname, port }, { secureTransport: 'off' });
    await withTimeout(probe.opened, ms, 'connect');
    return true;
  } catch {
    return false;
  } finally {
    probe?.close().catch(() => {});
  }
}

class RedisConnection {
  // `node` ({host, port}): a Redis Cluster node the core named; else REDIS_HOST:REDIS_PORT.
  // The first write goes out without waiting for the connection to open (the runtime sends it
  // once it is): one wake-up less per request, which under load is a scheduling delay less. The
  // connect timeout still holds (the watchdog's deadline is the connect's until the connection
  // opened: read()), and a failure before the connection opened is reported as the connect's
  // (failure()).
  static open(env, node) {
    const hostname = node ? node.host : (env.REDIS_HOST || '127.0.0.1');
    const port = node ? node.port : intVar(env.REDIS_PORT, 6379);
    const tls = ['1', 'true', 'on', 'yes'].includes(String(env.REDIS_TLS ?? '').toLowerCase());
    const c = new RedisConnection();
    c.timeoutMs = intVar(env.REDIS_TIMEOUT_MS, 2000);
    c.connectMs = intVar(env.REDIS_CONNECT_TIMEOUT_MS, 1000);
    c.isOpen = false;  // known to be: a read returned bytes (else ask opened())
    c.openFailure = null;
    c.deadline = 0;  // of the read under way (0: none)
    c.timer = null;
    c.timerAt = 0;
    // Rejected by the watchdog when a read's time is up: a read waits on it too (closing a socket
    // whose connect has not completed does not end a read of it).
    c.expiry = new Promise((resolve, reject) => {
      c.expireRead = reject;
    });
    c.expiry.catch(() => {});
    c.address = { hostname, port, tls };
    c.socket = connect({ hostname, port }, { secureTransport: tls ? 'on' : 'off' });
    c.writer = c.socket.writable.getWriter();
    c.reader = c.socket.readable.getReader();
    return c;
  }

  // A read's time limit, kept by one watchdog timer per connection rather than a timer and a
  // promise per read (their setTimeout, clearTimeout and wrapper measured ~45 µs of workerd CPU
  // per Redis hit, docs/benchmarks.md). The timer is armed for the read's deadline and never
  // cleared when the read ends in time (the runtime drops a request's timers when it ends); when
  // it fires it looks at the read under way, if any: none, it stops; one whose deadline moved
  // (a later read, or the connection opened meanwhile), it waits the rest; one past its deadline,
  // it ends the read (`expiry`) and closes the socket, and read() reports the timeout. A read whose
  // deadline comes before the timer's gets a timer of its own (the old one cleared). Until the
  // connection opens, the deadline is the connect's (REDIS_CONNECT_TIMEOUT_MS; every write is
  // followed by a read at once, so it runs from the connect); from then on the read's own.
  watch(readMs) {
    this.readMs = readMs;
    this.waitsForOpen = !this.isOpen;
    this.deadline = Date.now() + (this.waitsForOpen ? this.connectMs : readMs);
    if (this.timer !== null && this.timerAt <= this.deadline) return;
    if (this.timer !== null) clearTimeout(this.timer);
    this.arm(this.deadline);
  }

  arm(at) {
    this.timerAt = at;
    this.timer = setTimeout(() => this.expire(), Math.max(0, at - Date.now()));
  }

  async expire() {
    this.timer = null;
    if (!this.deadline || !this.socket) return;  // no read under way
    const deadline = this.deadline;
    if (this.waitsForOpen && await this.opened()) {
      if (this.deadline !== deadline) return;  // that read ended meanwhile
      this.isOpen = true;
      this.waitsForOpen = false;
      this.deadline = Date.now() + this.readMs;  // opened meanwhile: the read's own time from here
    }
    const now = Date.now();
    if (now < this.deadline) {
      this.arm(this.deadline);
      return;
    }
    if (this.waitsForOpen) this.openFailure ??= `connect timed out after ${this.connectMs} ms`;
    this.expireRead(new Error(this.waitsForOpen ? this.openFailure
                                                : `read timed out after ${this.readMs} ms`));
    this.close();
  }

  // Whether the connection opened (`opened` fulfilled; rejected, its reason is kept), asked on a
  // failure path only: a handler on `opened` for every connection measured ~20 µs of workerd CPU
  // per Redis hit. A settled `opened` answers in a microtask, before the zero timer.
  opened() {
    if (this.isOpen) return true;
    const { socket } = this;
    if (!socket) return false;
    return Promise.race([
      socket.opened.then(() => true, (e) => {
        this.openFailure ??= String(e?.message ?? e);
        return false;
      }),
      new Promise((resolve) => setTimeout(() => resolve(false), 0)),
    ]);
  }

  // `e` as the core should hear it: before the connection opened, the connect's failure
  // ("connect..." tells the core nothing was written: a cluster retries it at another node).
  async failure(e) {
    if (await this.opened()) return e;
    let why = this.openFailure ?? String(e?.message ?? e);
    // workerd words a refused TLS handshake as it words a refused connection (the reason goes to
    // its own log only). A plain TCP connection to the same address tells them apart: if it
    // opens, the node listens and the handshake failed, which no retry with the same trust
    // changes; the core then ends the round at once (kTlsHandshakeFailed, shared/redis_cluster.h).
    const { hostname, port, tls } = this.address;
    if (tls && !why.includes('timed out') && await acceptsTcp(hostname, port, this.connectMs)) {
      why = `TLS handshake failed with ${hostname}:${port} (it accepts TCP): ${why}`;
    }
    return new Error(why.startsWith('connect') ? why : `connect: ${why}`);
  }

  // Every write is followed by a read (drive), which reports the write's failure and whose
  // timeout covers a write that never completes: one timer and one wake-up less per round
  // (measured with the listener change in watchClient).
  write(bytes) {
    this.writer.write(bytes).catch((e) => {
      this.writeFailure ??= e;
    });
  }

  // `blocksMs`: how long Redis may hold this reply on purpose (the core's redis_blocks_ms).
  async read(blocksMs = 0) {
    this.watch(this.timeoutMs + blocksMs);
    let result;
    try {
      result = await Promise.race([this.reader.read(), this.expiry]);
    } catch (e) {
      this.deadline = 0;
      throw await this.failure(this.writeFailure ?? e);
    }
    this.deadline = 0;
    if (!result.done) this.isOpen = true;
    if (result.done) {
      // Not worded "connect...": the core reads that as nothing sent, and this write may have run.
      throw this.writeFailure ? await this.failure(this.writeFailure)
                              : new Error('Redis closed the connection');
    }
    return result.value;
  }

  close() {
    this.socket?.close().catch(() => {});
    this.socket = null;
  }
}

// The client went away: nothing is answered, the request is over.
class ClientGone extends Error {}

// A request's Redis connections: one per node ('' = REDIS_HOST:REDIS_PORT; on a Redis Cluster
// "host:port" of the node the core named), at most MAX_SOCKETS (Workers' limit per request; the
// core names the ones to close before it would need more), and the one the last write went to.
const MAX_SOCKETS = 6;

function nodeAddress(node) {
  if (!node) return '';
  return node.host.includes(':') ? `[${node.host}]:${node.port}` : `${node.host}:${node.port}`;
}

function closeNode(io, address) {
  io.conns.get(address)?.close();
  io.conns.delete(address);
}

function closeAll(io) {
  for (const c of io.conns.values()) c.close();
  io.conns.clear();
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The socket of `node` for a write, opened (or opened anew) as the core says.
function connectionFor(io, env, node, newConnection) {
  const address = nodeAddress(node);
  if (newConnection || !io.conns.has(address)) {
    closeNode(io, address);
    if (io.conns.size >= MAX_SOCKETS) throw new Error('more Redis sockets than a request may hold');
    io.conns.set(address, RedisConnection.open(env, node));
  }
  return io.conns.get(address);
}

// A step in parts (a spread round over several cluster nodes; its `close` and `delay_ms` are
// done): every part is written to its node's socket and every socket read concurrently, each
// part's bytes fed back by its index until the core says that part is settled (`wait`); the
// call that settles the last part returns the round's next step. A part whose socket fails is
// reported for that part only (edge.failPart): the core decides as for one node (retry what was
// unsent, else a store failure) once every part is settled. A client that goes away ends it all.
async function driveParts(edge, step, io, env) {
  const handle = step.handle;
  const blocksMs = step.redis_blocks_ms ?? 0;
  let next = null;
  let settled = false;
  let offset = 0;
  const parts = step.parts.map((part, index) => {
    const bytes = step.payload.subarray(offset, offset + part.bytes);
    offset += part.bytes;
    return { index, node: part.node, newConnection: part.new_connection, bytes };
  });
  const one = async ({ index, node, newConnection, bytes }) => {
    const address = nodeAddress(node);
    let s;
    try {
      const redis = connectionFor(io, env, node, newConnection);
      await redis.write(bytes);
      for (;;) {
        const chunk = await redis.read(blocksMs);
        if (io.gone) throw new ClientGone();
        s = edge.feedPart(handle, index, chunk);
        if (s?.part !== index) break;  // the round's next step
        if (s.action === 'wait') return;
        if (s.action === 'redis') await redis.write(s.payload);  // the scripts it lacked, as EVAL
      }
    } catch (e) {
      if (io.gone) throw new ClientGone();
      closeNode(io, address);
      s = edge.failPart(handle, index, String(e?.message ?? e));
      if (s?.part === index) return;
    }
    settled = true;
    next = s;
  };
  await Promise.all(parts.map(one));
  if (!settled) throw new Error('the core settled no round after its parts');
  return next;
}

// Carries out Redis steps until the core answers (respond) or is done. Any I/O failure goes back
// to the core (edge.fail), which decides: another connection, a stale L1 copy, or a 503. A step
// that opens an event stream comes back unperformed while `io.stream` is not set: the caller
// starts the response, then drives on from it.
async function drive(edge, step, io, env) {
  while (step && (step.action === 'redis' || step.action === 'read')) {
    if (step.stream && !io.stream) return step;
    if (step.redis_blocks_ms > 0) watchClient(io);
    try {
      if (step.action === 'redis') {
        for (const address of step.close ?? []) closeNode(io, address);
        if (step.delay_ms > 0) {
          await sleep(step.delay_ms);  // a cluster's backoff (TRYAGAIN, a failover)
          if (io.gone) throw new ClientGone();
        }
        if (step.parts) {
          io.current = '';
          step = await driveParts(edge, step, io, env);
          continue;
        }
        const address = nodeAddress(step.node);
        io.current = address;
        if (step.new_connection || !io.conns.has(address)) {
          closeNode(io, address);
          if (io.conns.size >= MAX_SOCKETS) throw new Error('more Redis sockets than a request may hold');
          io.conns.set(address, RedisConnection.open(env, step.node));
        }
        io.conns.get(address).write(step.payload);
      }
      const redis = io.conns.get(io.current);
      if (!redis) throw new Error('no Redis connection to read from');
      const bytes = await redis.read(step.redis_blocks_ms ?? 0);
      if (io.gone) throw new ClientGone();
      step = edge.feed(step.handle, bytes);
    } catch (e) {
      if (io.gone) {
        closeAll(io);
        throw new ClientGone();
      }
      closeNode(io, io.current);
      step = edge.fail(step.handle, String(e?.message ?? e));
    }
  }
  if (step?.ended) io.handle = 0;  // the core ended the request with its answer
  return step;
}

// The request's work is done: its handle ends, and its sockets are left to the runtime, which
// closes every socket a request opened when the request ends (this answer's, or the background
// work's it was handed to). Nothing is unread on them here: every reply the core asked for was
// read. Closing each one from JS (socket.close(): its promise, the streams' close and cancel)
// measured ~12 to 20 % of the workerd CPU of a conditional read (docs/benchmarks.md); the
// connections were still all closed at the end of each request (Redis's connected_clients,
// bench/edge_cpu.mjs). The failure paths close what they abandon at once (closeNode, closeAll).
function finish(edge, handle, io) {
  io.conns.clear();
  edge.end(handle);
}

// The body of a response the core opened as an event stream (`stream` on its step): keep-alive
// comments until close(bytes) writes the answer and ends it. A write that fails, or the stream
// cancelled by the runtime (the client is gone), calls `gone`.
class EventStream {
  constructor(spec, gone) {
    this.open = true;
    this.readable = new ReadableStream({
      start: (controller) => {
        this.controller = controller;
      },
      cancel: () => {
        this.stop();
        gone();
      },
    });
    const keepalive = encoder.encode(spec.keepalive);
    this.timer = setInterval(() => {
      if (!this.write(keepalive)) gone();
    }, spec.keepalive_ms);
  }

  write(bytes) {
    if (!this.open) return false;
    try {
      this.controller.enqueue(bytes);
      return true;
    } catch {
      this.stop();
      return false;
    }
  }

  stop() {
    this.open = false;
    clearInterval(this.timer);
  }

  close(bytes) {
    if (bytes?.length) this.write(bytes);
    if (this.open) {
      this.stop();
      try {
        this.controller.close();
      } catch {
        // cancelled meanwhile: nobody reads it
      }
    }
  }
}

// Until the answer goes out: a client that disconnects ends the request at once (the open Redis
// socket is closed, a relayed call's BLPOP with it; the core forgets the request: edge.abandon).
// When a relayed call was outstanding, the core gives its cancel mark, sent here on a fresh
// connection in the background, best effort (a failure is logged): the agent running the call
// cancels it upstream. The agent still drops the call if it reads it after its deadline.
// clientGone(io) is the same for an event stream whose write failed or was cancelled.
// The abort listener is registered only once the request is about to wait on purpose
// (watchClient(io): a round the core marks `redis_blocks_ms`, or an event stream): a listener on
// request.signal has workerd watch the client's connection, measured at ~50 to 80 us of CPU per
// request (bench/edge.mjs); a read of a few milliseconds gains nothing from ending early, and its
// answer to a client that left is dropped by the runtime. Until then a request makes no closure
// for it: these are functions of `io` (its request, edge, env and ctx).
function clientGone(io) {
  if (io.gone || io.answered) return;
  io.gone = true;
  io.stream?.stop();
  const handle = io.handle;
  console.log(`quiver-edge: the client went away; request ${handle} stopped`);
  if (!handle) return;
  io.ended = true;
  closeAll(io);
  const { edge, env } = io;
  const cancel = edge.abandon(handle);
  if (cancel?.action !== 'redis') {
    log(cancel);
    return;
  }
  const sent = (async () => {
    const own = { conns: new Map(), current: '', gone: false };
    try {
      log(await drive(edge, cancel, own, env));
    } catch (e) {
      console.error(`quiver-edge: relay: cancel mark not sent: ${e?.message ?? e}`);
    } finally {
      closeAll(own);
      edge.end(cancel.handle);
    }
  })();
  io.ctx?.waitUntil?.(sent);
}

function watchClient(io) {
  if (io.watching || !io.request) return;
  const signal = io.request.signal;
  if (!signal || typeof signal.addEventListener !== 'function') return;
  io.watching = signal;
  io.onAbort = () => clientGone(io);
  signal.addEventListener('abort', io.onAbort);
  if (signal.aborted) clientGone(io);
}

function unwatchClient(io) {
  io.watching?.removeEventListener('abort', io.onAbort);
}

// ---- HTTP --------------------------------------------------------------------------------------

async function readBody(request) {
  if (!request.body) return new Uint8Array(0);
  const reader = request.body.getReader();
  const chunks = [];
  let size = 0;
  while (size <= MAX_BODY_BYTES) {
    const { value, done } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.length;
  }
  if (size > MAX_BODY_BYTES) reader.cancel().catch(() => {});
  const body = new Uint8Array(Math.min(size, MAX_BODY_BYTES + 1));
  let at = 0;
  for (const c of chunks) {
    const part = c.subarray(0, body.length - at);
    body.set(part, at);
    at += part.length;
    if (at === body.length) break;
  }
  return body;
}

const NO_BODY = new Uint8Array(0);

// A path and a query the URL parser would give back unchanged: characters it leaves as they are
// (no escaping to do), no "." segment to resolve (nor "%2e"), no backslash. Anything else goes
// through URL.
const PLAIN_PATH = /^\/[A-Za-z0-9\-._~!$&()*+,;=:@/%]*$/;
const DOT_SEGMENT = /\/\.|%2e/i;
const PLAIN_QUERY = /^[A-Za-z0-9\-._~!$&()*+,;=:@/?%]*$/;

// request.url's path and query as `new URL(...)`'s pathname and search (without the "?") give
// them, split by hand when the URL parser would change nothing (a URL object per request
// measured ~11 µs of workerd CPU per Redis hit).
function pathAndQuery(url) {
  const at = url.indexOf('/', url.indexOf('//') + 2);
  const q = url.indexOf('?', at);
  const hash = url.indexOf('#');
  if (at > 0 && hash < 0) {
    const path = q < 0 ? url.slice(at) : url.slice(at, q);
    const query = q < 0 ? '' : url.slice(q + 1);
    if (PLAIN_PATH.test(path) && !DOT_SEGMENT.test(path) && PLAIN_QUERY.test(query)) {
      return [path, query];
    }
  }
  const parsed = new URL(url);
  return [parsed.pathname, parsed.search.slice(1)];
}

// The request's meta as the core reads it (shared/edge_wire.cpp): {method, path, query, headers}.
function requestMeta(request) {
  const [path, query] = pathAndQuery(request.url);
  const headers = [];
  request.headers.forEach((value, name) => headers.push([name, value]));
  return JSON.stringify({ method: request.method, path, query, headers });
}

function internalError(why) {
  console.error(`quiver-edge: ${why}`);
  return new Response(JSON.stringify({ error: { code: 'INTERNAL', message: 'internal error' } }), {
    status: 500,
    headers: { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' },
  });
}

// 503 SERVICE_UNAVAILABLE: the isolate has no working core yet (its wasm failed to instantiate).
function unavailable(why) {
  console.error(`quiver-edge: ${why}`);
  const body = { error: { code: 'SERVICE_UNAVAILABLE', message: 'the edge is starting; retry shortly' } };
  return new Response(JSON.stringify(body), {
    status: 503,
    headers: { 'Content-Type': 'application/json', 'Cache-Control': 'no-store', 'Retry-After': '1' },
  });
}

// A step's headers as Response takes them fastest: a plain object (workerd walks an array of
// pairs through the iterator protocol, pair by pair: measured at ~7% of an L1 hit's CPU), or a
// Headers object when a name repeats. A respond step's headers come as that object already when
// no name repeats (edge_wire.h); pairs ([[name, value], ...]) are turned into one here.
function responseHeaders(pairs) {
  if (!Array.isArray(pairs)) return pairs;
  const object = {};
  const seen = new Set();
  for (const [name, value] of pairs) {
    const lower = name.toLowerCase();
    if (seen.has(lower)) {
      const headers = new Headers();
      for (const [n, v] of pairs) headers.append(n, v);
      return headers;
    }
    seen.add(lower);
    object[name] = value;
  }
  return object;
}

function log(step, headers) {
  if (!step?.log) return;
  const id = (Array.isArray(headers) ? headers.find(([name]) => name === 'X-Request-Id')?.[1]
                                     : headers?.['X-Request-Id']) ?? '-';
  // Routine events (an accepted webhook) at info; everything else is a problem.
  (step.log_level === 'info' ? console.log : console.error)(`quiver-edge ${id}: ${step.log}`);
}

// An answer the host gives when the core gave none (a bug), once an event stream has started:
// the JSON-RPC error as the stream's one event (its 200 head went out).
const INTERNAL_ERROR_EVENT = encoder.encode('event: message\ndata: {"jsonrpc":"2.0","id":null,' +
  '"error":{"code":-32603,"message":"internal error"}}\n\n');

// A respond step's queued revalidations (`background`): driven after the answer, without
// delaying it (ctx.waitUntil); that work ends the handle.
function queueBackground(edge, step, io, env, ctx, headers) {
  if (!step.background) return;
  const h = io.handle;
  io.handle = 0;
  ctx.waitUntil((async () => {
    try {
      log(await drive(edge, edge.background(h), io, env), headers);
    } finally {
      finish(edge, h, io);
    }
  })());
}

// The rest of a request whose response is an event stream (io.stream): the rounds go on, the
// answer's events end the stream. A client gone meanwhile (a failed write, the stream cancelled,
// the signal) was abandoned by clientGone: nothing more is written.
async function streamAnswer(edge, step, io, env, ctx) {
  const headers = step.stream.headers;
  try {
    step = await drive(edge, step, io, env);
    io.answered = true;
    if (!step || step.action !== 'respond') {
      throw new Error(`no response from the core: ${step?.log ?? 'null step'}`);
    }
    log(step, headers);
    io.stream.close(step.payload);
    queueBackground(edge, step, io, env, ctx, headers);
  } catch (e) {
    if (e instanceof ClientGone) {
      if (io.handle && !io.ended) finish(edge, io.handle, io);
      io.handle = 0;  // ended when the client went
      return;
    }
    io.answered = true;
    console.error(`quiver-edge: ${e?.stack ?? e}`);
    io.stream.close(INTERNAL_ERROR_EVENT);
  } finally {
    unwatchClient(io);
    io.stream.stop();
    if (io.handle) finish(edge, io.handle, io);
  }
}

export default {
  async fetch(request, env, ctx) {
    let edge;
    try {
      edge = await getEdge(env);
    } catch (e) {
      return unavailable(`the wasm module could not be instantiated (retried with the next request): ${e?.message ?? e}`);
    }
    const io = { handle: 0, conns: new Map(), current: '', gone: false, answered: false,
                 ended: false, stream: null, request, edge, env, ctx, watching: null,
                 onAbort: null };
    let streaming = false;  // the rest is streamAnswer's
    try {
      const meta = requestMeta(request);
      const requestBody = request.body ? await readBody(request) : NO_BODY;
      let step = edge.begin(meta, requestBody);
      io.handle = step?.ended ? 0 : step?.handle ?? 0;  // ended: an answer with nothing after it
      if (io.gone) throw new ClientGone();
      step = await drive(edge, step, io, env);
      if (step?.stream) {
        // The core is about to wait and the client takes an event stream: the response starts
        // now, and keep-alives show whether the client is still there while the rounds go on.
        io.stream = new EventStream(step.stream, () => clientGone(io));
        watchClient(io);
        streaming = true;
        ctx.waitUntil(streamAnswer(edge, step, io, env, ctx));
        return new Response(io.stream.readable,
                            { status: step.stream.status,
                              headers: responseHeaders(step.stream.headers) });
      }
      io.answered = true;
      unwatchClient(io);
      if (!step || step.action !== 'respond') {
        throw new Error(`no response from the core: ${step?.log ?? 'null step'}`);
      }
      const { status, headers } = step;
      log(step, headers);
      const empty = step.payload.length === 0 || status === 304 || status === 204;
      const body = empty ? null : step.payload;
      const response = new Response(body, { status, headers: responseHeaders(headers) });
      queueBackground(edge, step, io, env, ctx, headers);
      return response;
    } catch (e) {
      if (e instanceof ClientGone) {
        if (io.handle && !io.ended) finish(edge, io.handle, io);
        io.handle = 0;  // ended when the client went
        return new Response(null, { status: 499 });  // nobody reads it
      }
      return internalError(e?.stack ?? String(e));
    } finally {
      if (!streaming) {
        unwatchClient(io);
        if (io.handle) finish(edge, io.handle, io);
      }
    }
  },
};
