// Agent benchmark: the discovery API of `quiver-agent serve` on its embedded SQLite store against
// nginx serving the very bytes it answered as static files, side by side in one run, with wrk.
//
//   node bench/agent_vs_nginx.mjs [--duration 5] [--agent build/native/native-agent/quiver-agent]
//                                 [--connections 1,16,64] [--write docs/benchmarks.md]
//
// Set-up: the agent lists one real upstream (server-everything over stdio) into SQLite in a temp
// data directory; a caller token is minted with `quiver-agent token`; one tool is disabled
// through the API (so every answer goes through the preference overlay, as in bench/edge.mjs).
// Once the manifest is fresh, the two discovery answers are fetched once and written to files:
//   GET /v1/mcp-connections/everything/manifest   one connection
//   GET /v1/manifests                             every granted connection (here: the same one)
// nginx (Debian's nginx-light, as this user, a temp prefix, access log off) serves those files at
// the same paths with the same Content-Type and an ETag, once with worker_processes 1 and once
// with auto (one per core). Each target at 1, 16 and 64 keep-alive connections (`--connections`);
// the agent and nginx also with If-None-Match (304). wrk's p50 / p99 latency, requests/s and
// answers outside 2xx/3xx (a 503 OVERLOADED), and agent / nginx ratios.
// Needs wrk and nginx (scripts/setup.sh --bench, run when either is missing) and a built agent.
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Agent, defaultAgentBinary, nodeModules } from '../tests/edge/agent.mjs';
import {
  argValue, freePort, httpRequest, repoRoot, sleep, spawnTied, stopTied, waitFor,
} from '../tests/edge/harness.mjs';
import { hasWrk, machineLine, printRow, wrk, wrkVersion, writeSection } from './report.mjs';

const duration = Number(argValue('--duration', '5'));
const agentBinary = path.resolve(argValue('--agent', defaultAgentBinary()));
const writeTo = argValue('--write', '');
const connectionCounts = argValue('--connections', '1,16,64').split(',').map(Number);

const MEMBER = 'bench';
const CID = 'everything';
const ONE = `/v1/mcp-connections/${CID}/manifest`;
const ALL = '/v1/manifests';

// Ctrl-C or a TERM ends the run at the next step; the servers stop and the temp dir goes (the
// servers also stop by themselves when this process dies: harness.mjs spawnTied).
let interrupted = '';
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => { interrupted = sig; });
const checkInterrupted = () => {
  if (interrupted) throw new Error(`stopped by ${interrupted}`);
};

const hasNginx = () => !spawnSync('nginx', ['-v']).error;

function ensureTools() {
  if (!hasWrk() || !hasNginx()) {
    console.log('installing wrk and nginx-light: scripts/setup.sh --bench');
    try {
      execFileSync('bash', [path.join(repoRoot, 'scripts', 'setup.sh'), '--bench'],
                   { stdio: 'inherit' });
    } catch {
      console.error('bench/agent_vs_nginx.mjs needs wrk and nginx: run scripts/setup.sh --bench');
      process.exit(2);
    }
  }
  if (!existsSync(agentBinary)) {
    console.error(`no agent at ${agentBinary}: build it first:\n` +
                  '  cmake -S . -B build/native -DCMAKE_BUILD_TYPE=RelWithDebInfo && ' +
                  'cmake --build build/native -j2 --target quiver-agent');
    process.exit(2);
  }
}

// nginx in the foreground with everything under `prefix` (config, pid, temp paths, error log),
// serving the files below `root` on a free loopback port. Tied to this process like the agent.
class Nginx {
  static async start({ root, prefix, workers, logs }) {
    const n = new Nginx();
    n.port = await freePort();
    mkdirSync(prefix, { recursive: true });
    const conf = path.join(prefix, 'nginx.conf');
    // Run as root, nginx starts its workers as `nobody` (they only read `root`, made readable
    // for everyone); as anyone else, they run as that user.
    writeFileSync(conf, `\
daemon off;
master_process on;
worker_processes ${workers};
pid ${prefix}/nginx.pid;
error_log ${prefix}/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  types { }
  default_type application/json;
  etag on;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_timeout 5s;
  keepalive_requests 1000;
  client_body_temp_path ${prefix}/client_body;
  proxy_temp_path ${prefix}/proxy;
  fastcgi_temp_path ${prefix}/fastcgi;
  uwsgi_temp_path ${prefix}/uwsgi;
  scgi_temp_path ${prefix}/scgi;
  server {
    listen 127.0.0.1:${n.port};
    root ${root};
  }
}
`);
    n.proc = spawnTied('nginx', ['-p', `${prefix}/`, '-c', conf, '-e', `${prefix}/error.log`]);
    for (const s of [n.proc.stdout, n.proc.stderr]) {
      s.setEncoding('utf8');
      s.on('data', (d) => logs.push(...d.split('\n').filter(Boolean)));
    }
    n.exited = new Promise((resolve) => n.proc.once('exit', resolve));
    const spawnError = new Promise((_, reject) => n.proc.once('exit', (code) => reject(
      new Error(`nginx exited (${code})\n${logs.join('\n')}`))));
    spawnError.catch(() => {});
    try {
      await Promise.race([spawnError, waitFor('nginx', async () =>
        (await httpRequest(n.port, 'GET', ONE)).status === 200, 10000)]);
    } catch (e) {
      await n.stop();
      throw e;
    }
    return n;
  }

  async stop() {
    await stopTied(this.proc, this.exited);
    this.proc = null;
  }
}

async function main() {
  ensureTools();
  const logs = [];
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'quiver-agent-vs-nginx-'));
  const servers = [];
  try {
    const keyFile = path.join(tmp, 'caller-token.key');
    writeFileSync(keyFile, randomBytes(32).toString('base64'), { mode: 0o600 });
    const everything = path.join(nodeModules(), '@modelcontextprotocol', 'server-everything',
                                 'dist', 'index.js');
    const agent = await Agent.start({
      binary: agentBinary, logs,
      config: {
        mcpServers: { [CID]: { command: process.execPath, args: [everything, 'stdio'] } },
        quiver: { members: [MEMBER], operators: [MEMBER], grants: { [MEMBER]: [CID] },
                  caller_token_keys: { bench: { file: keyFile } } },
      },
    });
    servers.push(agent);
    const token = agent.token(MEMBER);
    const auth = { Authorization: `Bearer ${token}` };

    // Wait for the first listing, then disable one tool: the answers go through the overlay.
    let first;
    await waitFor('the first listing of everything', async () => {
      first = await agent.request('GET', ONE, { headers: auth });
      return first.json?.status === 'fresh';
    }, 60000);
    const put = await agent.request('PUT', `/v1/mcp-connections/${CID}/preferences`, {
      headers: { ...auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ type: 'tool', key: 'echo', enabled: false }) });
    if (put.status !== 200) throw new Error(`disabling tool:echo answered ${put.status}`);

    // The bytes nginx serves: the agent's answers, fetched once, at the same paths.
    const root = path.join(tmp, 'www');
    const bodies = {};
    for (const p of [ONE, ALL]) {
      const res = await agent.request('GET', p, { headers: auth });
      const conn = p === ONE ? res.json : res.json?.connections?.[0];
      if (res.status !== 200 || conn?.status !== 'fresh') {
        throw new Error(`GET ${p} answered ${res.status}: ${res.text.slice(0, 300)}`);
      }
      if (conn.manifest.tools.items.some((t) => t.name === 'echo')) {
        throw new Error(`GET ${p} still lists the disabled tool echo`);
      }
      const file = path.join(root, p);
      mkdirSync(path.dirname(file), { recursive: true });
      writeFileSync(file, res.text);
      bodies[p] = { text: res.text, bytes: Buffer.byteLength(res.text), etag: res.headers.etag,
                    type: res.headers['content-type'] };
    }
    // nginx's workers may run as nobody: the tree they read is readable by everyone (it holds
    // only the answers; the key and the agent's store are in their own 0700 directories).
    chmodSync(tmp, 0o755);
    for (const d of [root, path.join(root, 'v1'), path.join(root, 'v1', 'mcp-connections'),
                     path.join(root, 'v1', 'mcp-connections', CID)]) {
      chmodSync(d, 0o755);
    }
    chmodSync(keyFile, 0o600);

    const nginx1 = await Nginx.start({ root, prefix: path.join(tmp, 'nginx-1'), workers: 1, logs });
    servers.push(nginx1);
    checkInterrupted();
    const nginxAuto = await Nginx.start({ root, prefix: path.join(tmp, 'nginx-auto'),
                                          workers: 'auto', logs });
    servers.push(nginxAuto);
    const nginxEtags = {};
    for (const p of [ONE, ALL]) {
      const res = await httpRequest(nginx1.port, 'GET', p);
      if (res.text !== bodies[p].text) throw new Error(`nginx serves other bytes at ${p}`);
      if (res.headers['content-type'] !== bodies[p].type || !res.headers.etag) {
        throw new Error(`nginx answers ${p} with ${res.headers['content-type']}, ` +
                        `ETag ${res.headers.etag}`);
      }
      nginxEtags[p] = res.headers.etag;
    }
    // Both answer If-None-Match with 304.
    for (const [port, p, etag] of [[agent.port, ONE, bodies[ONE].etag],
                                   [nginx1.port, ONE, nginxEtags[ONE]]]) {
      const res = await httpRequest(port, 'GET', p,
                                    { headers: { ...(port === agent.port ? auth : {}),
                                                 'If-None-Match': etag } });
      if (res.status !== 304) throw new Error(`If-None-Match on ${port}${p} answered ${res.status}`);
    }

    const targets = [
      { name: 'agent: one connection', port: agent.port, path: ONE, headers: auth,
        base: 'nginx, 1 worker: one connection' },
      { name: 'nginx, 1 worker: one connection', port: nginx1.port, path: ONE },
      { name: 'nginx, auto workers: one connection', port: nginxAuto.port, path: ONE },
      { name: 'agent: one connection, If-None-Match (304)', port: agent.port, path: ONE,
        headers: { ...auth, 'If-None-Match': bodies[ONE].etag },
        base: 'nginx, 1 worker: one connection, If-None-Match (304)' },
      { name: 'nginx, 1 worker: one connection, If-None-Match (304)', port: nginx1.port,
        path: ONE, headers: { 'If-None-Match': nginxEtags[ONE] } },
      { name: 'agent: /v1/manifests', port: agent.port, path: ALL, headers: auth,
        base: 'nginx, 1 worker: /v1/manifests' },
      { name: 'nginx, 1 worker: /v1/manifests', port: nginx1.port, path: ALL },
      { name: 'nginx, auto workers: /v1/manifests', port: nginxAuto.port, path: ALL },
    ];
    const rows = [];
    for (const connections of connectionCounts) {
      for (const t of targets) {
        checkInterrupted();
        const r = wrk({ port: t.port, path: t.path, connections, duration, headers: t.headers });
        rows.push({ ...t, connections, ...r });
        printRow(t.name, connections, r);
        await sleep(200);  // let the last connections close before the next target
      }
    }
    // The manifest must still be fresh (a refresh during the run would change what was measured).
    const after = await agent.request('GET', ONE, { headers: auth });
    if (after.json?.status !== 'fresh') console.warn(`note: the manifest is ${after.json?.status}`);
    if (writeTo) writeSection(writeTo, 'Agent discovery API vs nginx', sectionLines(rows, bodies));
  } catch (e) {
    console.error(logs.slice(-40).join('\n'));
    throw e;
  } finally {
    for (const s of servers.reverse()) await s.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

// `nginx -v` prints "nginx version: nginx/1.22.1" on stderr.
const nginxVersion = () =>
  /nginx\/\S+/.exec(spawnSync('nginx', ['-v'], { encoding: 'utf8' }).stderr ?? '')?.[0] ?? 'nginx';

function sectionLines(rows, bodies) {
  const find = (name, c) => rows.find((r) => r.name === name && r.connections === c);
  const ratio = (r) => {
    const b = r.base && find(r.base, r.connections);
    if (!b) return '| | | |';
    return `| ${(r.p50 / b.p50).toFixed(1)} × | ${(r.p99 / b.p99).toFixed(1)} × | ` +
      `${(r.rps / b.rps).toFixed(2)} |`;
  };
  return [
    '',
    `\`node bench/agent_vs_nginx.mjs --duration ${duration} ` +
      `--connections ${connectionCounts.join(',')}\`, ` +
      `${new Date().toISOString().slice(0, 10)}:`,
    `${machineLine()}, wrk ${wrkVersion()}, ${nginxVersion()}, quiver-agent RelWithDebInfo.`,
    'One wrk thread, keep-alive; the agent, nginx and wrk share the machine (and other builds).',
    'The agent answers from its embedded SQLite store; nginx serves the bytes the agent answered',
    `(\`${ONE}\`: ${bodies[ONE].bytes} bytes, \`${ALL}\`: ${bodies[ALL].bytes} bytes;`,
    'the tools server-everything lists, one disabled) as static files, `application/json`, with',
    'an ETag. Ratios: the agent row against the nginx row with 1 worker just below it.',
    '',
    '| target | conns | p50 ms | p99 ms | max ms | req/s | non-2xx/3xx | agent / nginx p50 | ' +
      'agent / nginx p99 | agent / nginx req/s |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map((r) => `| ${r.name} | ${r.connections} | ${r.p50.toFixed(3)} | ` +
      `${r.p99.toFixed(3)} | ${r.max.toFixed(1)} | ${r.rps.toFixed(0)} | ${r.errors} ${ratio(r)}`),
  ];
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
