// What the HTTP benchmarks share: running wrk against a loopback port and reading its numbers,
// and writing one `## Section` of docs/benchmarks.md in place (bench/edge.mjs,
// bench/agent_vs_nginx.mjs).
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

// wrk's "12.34ms" as milliseconds.
export function parseDuration(text) {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(text);
  if (!m) return NaN;
  return Number(m[1]) * { us: 0.001, ms: 1, s: 1000, m: 60000 }[m[2]];
}

export const hasWrk = () => !spawnSync('wrk', ['--version']).error;

export function wrkVersion() {
  const out = spawnSync('wrk', ['--version'], { encoding: 'utf8' }).stdout ?? '';
  return /wrk (\S+)/.exec(out)?.[1] ?? '?';
}

// One wrk run: one thread, `connections` keep-alive connections for `duration` seconds against
// `method` (GET unless given; with `body`, through a wrk Lua script) http://127.0.0.1:port/path.
// p50 / p99 / max in ms, requests/s; `errors` counts answers outside 2xx and 3xx.
export function wrk({ port, path: target, connections, duration, headers = {}, method = 'GET',
                      body = null }) {
  const cmd = ['-t1', `-c${connections}`, `-d${duration}s`, '--latency', '--timeout', '5s'];
  for (const [k, v] of Object.entries(headers)) cmd.push('-H', `${k}: ${v}`);
  let dir = null;
  if (method !== 'GET' || body !== null) {
    if (`${method}${body ?? ''}`.includes(']==]')) throw new Error('wrk: "]==]" in the request');
    dir = mkdtempSync(path.join(os.tmpdir(), 'quiver-wrk-'));
    const script = path.join(dir, 'request.lua');
    writeFileSync(script, `wrk.method = [==[${method}]==]\n` +
                          (body === null ? '' : `wrk.body = [==[${body}]==]\n`));
    cmd.push('-s', script);
  }
  cmd.push(`http://127.0.0.1:${port}${target}`);
  let out;
  try {
    out = execFileSync('wrk', cmd, { encoding: 'utf8' });
  } finally {
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
  const pct = (p) => parseDuration(new RegExp(`^\\s+${p}%\\s+(\\S+)`, 'm').exec(out)?.[1] ?? '');
  const max = parseDuration(/^\s+Latency\s+\S+\s+\S+\s+(\S+)/m.exec(out)?.[1] ?? '');
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]);
  const errors = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0);
  const socketErrors = /Socket errors:.*/.exec(out)?.[0] ?? '';
  return { p50: pct(50), p99: pct(99), max, rps, errors, socketErrors };
}

// One console line per wrk row.
export function printRow(name, connections, r) {
  console.log(`${name.padEnd(52)} c=${String(connections).padStart(2)}` +
              `  p50 ${r.p50.toFixed(3)} ms  p99 ${r.p99.toFixed(3)} ms  max ${r.max.toFixed(1)} ms` +
              `  ${r.rps.toFixed(0)} req/s` +
              `${r.errors ? `  NON-2XX ${r.errors}` : ''} ${r.socketErrors}`);
}

export const machineLine = () => `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown CPU'}`;

// Replaces the section headed `## title` of `file` with `lines` (appended at the end when there is
// none). Hand-written notes under the table, from the section's first `### ` heading on, stay.
export function writeSection(file, title, lines) {
  const heading = `## ${title}\n`;
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    text = '# Benchmarks\n\n';
  }
  const start = text.indexOf(heading);
  let section = [`## ${title}`, ...lines].join('\n').trimEnd();
  if (start >= 0) {
    const next = text.indexOf('\n## ', start + 1);
    const old = text.slice(start, next < 0 ? text.length : next);
    const keep = old.indexOf('\n### ');
    if (keep >= 0) section += `\n\n${old.slice(keep + 1).trimEnd()}`;
    text = text.slice(0, start) + section + (next < 0 ? '\n' : `\n\n${text.slice(next + 1)}`);
  } else {
    text = `${text.trimEnd()}\n\n${section}\n`;
  }
  writeFileSync(file, text);
  console.log(`wrote the "${title}" section of ${file}`);
}
