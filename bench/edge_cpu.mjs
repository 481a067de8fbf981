// Edge benchmark by CPU, not requests/s: the CPU each process spends per request, which a shared,
// noisy machine moves far less than throughput (bench/edge.mjs measures requests/s and latency).
//
//   node bench/edge_cpu.mjs [--member everything|realistic] [--slices 5] [--duration 3]
//                           [--connections 16] [--edge-dirs build/wasm/edge[,other/edge...]]
//                           [--redis-only] [--paired]
//
// Targets, each a workerd process of its own on bench/edge_fixture.mjs's redis-server and member:
// the hand-written worker (connect, AUTH, GET of the bytes the edge answers: bench/workers/
// redis-get.mjs), and per edge build of --edge-dirs (an A/B of two builds: give two staged edge
// directories, or more) quiver-edge with the L1 off and conditional reads (the "Redis hit" of
// bench/edge.mjs), then the same with the L1 on (the "L1 hit"; not with --redis-only). Every
// target gets 3 s of load first; then `--slices` rounds, each running every target in turn for `--duration` seconds under
// wrk (one thread, keep-alive): the workerd process's CPU (utime + stime, /proc) and the
// redis-server's over that slice, divided by the requests wrk counted. Prints each target's median
// over the slices: requests/s, workerd µs per request, Redis µs per request.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Workerd, argValue, repoRoot } from '../tests/edge/harness.mjs';
import {
  KID, NS, PASSWORD, SECRET, startEdgeFixture, startMemberBaselines,
} from './edge_fixture.mjs';
import { hasWrk, machineLine, wrk } from './report.mjs';

const member = argValue('--member', 'everything');
const slices = Number(argValue('--slices', '5'));
const duration = Number(argValue('--duration', '3'));
const connections = Number(argValue('--connections', '16'));
const redisOnly = process.argv.includes('--redis-only');  // no L1-hit rows
// Each slice runs the targets in a new random order, and each target's figure is also given as
// the median of its per-slice differences from the first edge's (paired: a neighbour's load
// that moves both within a slice cancels out).
const paired = process.argv.includes('--paired');
const edgeDirs = argValue('--edge-dirs', path.join(repoRoot, 'build', 'wasm', 'edge')).split(',')
  .map((d) => path.resolve(d));

if (!hasWrk()) {
  console.error('bench/edge_cpu.mjs needs wrk: scripts/setup.sh --bench');
  process.exit(2);
}

// The process a spawnTied wrapper (sh) runs: its only child.
function served(pid) {
  const out = execFileSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' }).trim();
  return Number(out.split('\n')[0]);
}

// utime + stime of `pid`, in µs.
function cpuUs(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  const ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));
  return (Number(fields[11]) + Number(fields[12])) / ticks * 1e6;
}

const median = (values) => [...values].sort((a, b) => a - b)[values.length >> 1];

async function main() {
  const logs = [];
  const fx = await startEdgeFixture({ edgeDir: edgeDirs[0], member, logs });
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'quiver-edge-cpu-'));
  try {
    const { target, headers, sample, redisGet } = await startMemberBaselines(fx, member, tmp, logs);
    const env = (ttl) => ({
      QUIVER_TOKEN_KEYS: JSON.stringify({ [KID]: SECRET }), QUIVER_NAMESPACE: NS,
      QUIVER_L1_TTL_MS: String(ttl), QUIVER_L1_VALIDATE_MAX_AGE_MS: '600000',
      REDIS_PORT: String(fx.redis.port), REDIS_PASSWORD: PASSWORD,
    });
    const targets = [['hand-written: connect + AUTH + GET', redisGet, {}]];
    for (const [i, dir] of edgeDirs.entries()) {
      const name = edgeDirs.length > 1 ? ` (${String.fromCharCode(65 + i)}: ${dir})` : '';
      for (const [what, ttl] of [['Redis hit', 0], ['L1 hit', 600_000]]) {
        if (redisOnly && ttl) continue;
        const w = await Workerd.start({ config: `${dir}/workerd.capnp`, env: env(ttl), logs });
        fx.servers.push(w);
        targets.push([`quiver-edge, ${what}${name}`, w, headers]);
      }
    }
    for (const [, server, h] of targets) {
      wrk({ port: server.port, path: target, connections: 16, duration: 3, headers: h });
    }
    const redisPid = served(fx.redis.proc.pid);
    const results = new Map(targets.map(([name]) => [name, []]));
    for (let k = 0; k < slices; k++) {
      const order = paired ? [...targets].sort(() => Math.random() - 0.5) : targets;
      for (const [name, server, h] of order) {
        const pid = served(server.proc.pid);
        const w0 = cpuUs(pid);
        const r0 = cpuUs(redisPid);
        const r = wrk({ port: server.port, path: target, connections, duration, headers: h });
        const requests = r.rps * duration;
        if (r.errors) throw new Error(`${name}: ${r.errors} answers outside 2xx`);
        const workerd = (cpuUs(pid) - w0) / requests;
        const redis = (cpuUs(redisPid) - r0) / requests;
        // Every Redis connection a request opened is closed by the end of it (by the worker or
        // by the runtime when the request ends): what is left open is the fixture's own.
        await new Promise((resolve) => setTimeout(resolve, 200));
        const clients = Number(/connected_clients:(\d+)/.exec(await fx.db.call('INFO', 'clients'))[1]);
        results.get(name).push({ rps: r.rps, workerd, redis, clients });
      }
    }
    console.log(`${member} (${Buffer.byteLength(sample.text)} bytes), ${connections} connections, ` +
                `median of ${slices} slices of ${duration} s; ${machineLine()}, load average ` +
                `${os.loadavg().map((l) => l.toFixed(1)).join(' ')}`);
    const first = results.get(targets[1][0]);  // the first edge's Redis hit
    console.log('| target | req/s | workerd µs per request | Redis µs per request | ' +
                `Redis clients after a slice (most) |${paired ? ' paired difference (µs) |' : ''}`);
    console.log(`| --- | ---: | ---: | ---: | ---: |${paired ? ' ---: |' : ''}`);
    for (const [name, rows] of results) {
      const diff = median(rows.map((x, k) => x.workerd - first[k].workerd));
      console.log(`| ${name} | ${median(rows.map((x) => x.rps)).toFixed(0)} | ` +
                  `${median(rows.map((x) => x.workerd)).toFixed(0)} | ` +
                  `${median(rows.map((x) => x.redis)).toFixed(0)} | ` +
                  `${Math.max(...rows.map((x) => x.clients))} |` +
                  `${paired ? ` ${diff > 0 ? '+' : ''}${diff.toFixed(0)} |` : ''}`);
    }
  } finally {
    await fx.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
