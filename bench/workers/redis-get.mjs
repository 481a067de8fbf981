// Benchmark baseline: what a user would write by hand. Per request: connect to Redis
// (cloudflare:sockets; a socket cannot outlive its request), AUTH, GET one key holding the same
// bytes the edge serves, parse the bulk reply, answer. No auth of the caller, no grants, no
// freshness, no L1: the least work that reads a manifest from Redis.
import { connect } from 'cloudflare:sockets';

const enc = new TextEncoder();
const command = (...args) =>
  `*${args.length}\r\n${args.map((a) => `$${enc.encode(a).length}\r\n${a}\r\n`).join('')}`;

export default {
  async fetch(request, env) {
    const socket = connect({ hostname: env.REDIS_HOST, port: Number(env.REDIS_PORT) });
    try {
      const writer = socket.writable.getWriter();
      const reader = socket.readable.getReader();
      await writer.write(enc.encode(command('AUTH', env.REDIS_PASSWORD) + command('GET', env.KEY)));
      let buf = new Uint8Array(0);
      for (;;) {
        const { value, done } = await reader.read();
        if (done) throw new Error('closed');
        const joined = new Uint8Array(buf.length + value.length);
        joined.set(buf);
        joined.set(value, buf.length);
        buf = joined;
        // "+OK\r\n" then "$<n>\r\n<n bytes>\r\n"
        const start = 5;
        const eol = buf.indexOf(13, start);
        if (eol < 0) continue;
        const n = Number(new TextDecoder().decode(buf.subarray(start + 1, eol)));
        if (n < 0) return new Response('not found', { status: 404 });
        if (buf.length < eol + 2 + n + 2) continue;
        return new Response(buf.slice(eol + 2, eol + 2 + n), {
          headers: { 'Content-Type': 'application/json', 'Cache-Control': 'private, max-age=30' },
        });
      }
    } finally {
      socket.close().catch(() => {});
    }
  },
};
