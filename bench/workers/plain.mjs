// Benchmark baseline: the runtime's floor. Answers every request with fixed bytes (the body the
// edge serves for the same request, handed in as the BODY text binding): no wasm, no Redis.
export default {
  async fetch(request, env) {
    return new Response(env.BODY, {
      headers: { 'Content-Type': 'application/json', 'Cache-Control': 'private, max-age=30' },
    });
  },
};
