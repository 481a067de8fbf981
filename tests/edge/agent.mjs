// The real agent and a real upstream around the edge's processes (harness.mjs): `quiver-agent
// serve` with a configuration written into a temp dir, and tests/peers/test-upstream.mjs in HTTP
// mode. Both bind 127.0.0.1 on a free port and are tied to this process (harness.mjs spawnTied):
// they stop when stopped, and also when this process dies. Used by tests/edge/chain.mjs and
// bench/upstream_load.mjs.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

import {
  argValue, freePort, httpRequest, repoRoot, spawnTied, stopTied, waitFor,
} from './harness.mjs';

export const defaultAgentBinary = () => process.env.QUIVER_AGENT_BIN ||
  path.join(repoRoot, 'build', 'native', 'native-agent', 'quiver-agent');
// The quiver-agent a suite runs (--agent, else defaultAgentBinary()). When it is not built, says so
// and exits 77 (ctest's SKIP_RETURN_CODE): the suites that need it are skipped, not failed.
export function agentBinaryOrSkip() {
  const binary = path.resolve(argValue('--agent', defaultAgentBinary()));
  if (!existsSync(binary)) {
    console.log(`SKIP: the native quiver-agent is not built (${binary}); build build/native ` +
                'first (scripts/test.sh does), or pass --agent');
    process.exit(77);
  }
  return binary;
}
// `quiver-agent serve` on `cluster` (harness.mjs RedisCluster, its default user's `password`) for
// namespace `ns`, member alice granted every connection, caller tokens under `kid` with `secret`.
// The connections are `upstreams` ({id, tools, control}: a stdio test upstream with `tools` tools,
// watching the `control` file when given; or {id, server}: `server` is its mcpServers entry as
// is), by default one, `t`, with three tools; an upstream's `connection` is its
// `quiver.connections` entry (credential_mode, credentials...). `runtime` is merged into the
// configuration's `quiver.runtime`, `env` into the agent's environment (the credentials the
// connections name). Over TLS (`rediss+cluster://`, `redis_tls.ca_file`) when the cluster was
// started with TLS. Secrets reach it through its environment only.
export function startClusterAgent({ binary, logs, cluster, ns, kid, secret, password,
                                    upstreams = [{ id: 't', tools: 3 }], runtime = {}, env = {} }) {
  const scheme = cluster.tls ? 'rediss+cluster' : 'redis+cluster';
  const mcpServers = {};
  const connections = {};
  for (const { id, tools = 3, control, server, connection } of upstreams) {
    mcpServers[id] = server ?? {
      command: process.execPath,
      args: [testUpstreamScript, 'stdio', '--tools', String(tools), '--quiet',
             ...(control ? ['--control', control] : [])],
      env: { QUIVER_NODE_MODULES: nodeModules() },
    };
    if (connection) connections[id] = connection;
  }
  return Agent.start({
    binary, logs,
    config: {
      mcpServers,
      quiver: {
        namespace: ns,
        redis: `${scheme}://:\${CL_REDIS_PASSWORD}@127.0.0.1:${cluster.ports[0]},` +
               `127.0.0.1:${cluster.ports[1]}`,
        ...(cluster.tls ? { redis_tls: { ca_file: cluster.tls.ca } } : {}),
        caller_token_keys: { [kid]: { env: 'CL_TOKEN_KEY' } },
        members: ['alice'],
        grants: { alice: upstreams.map((u) => u.id) },
        runtime: { list_timeout_ms: 30000, request_timeout_ms: 30000, ...runtime },
        ...(Object.keys(connections).length ? { connections } : {}),
      },
    },
    env: { ...env, CL_REDIS_PASSWORD: password, CL_TOKEN_KEY: secret },
  });
}

export const nodeModules = () => process.env.QUIVER_NODE_MODULES ||
  path.join(repoRoot, 'build', 'node', 'node_modules');
export const testUpstreamScript = path.join(repoRoot, 'tests', 'peers', 'test-upstream.mjs');

// Collects a child's output lines into `logs` (and optionally echoes them).
function collect(stream, logs, echo) {
  stream.setEncoding('utf8');
  readline.createInterface({ input: stream }).on('line', (line) => {
    logs.push(line);
    if (echo) process.stderr.write(`${line}\n`);
  });
}

// `quiver-agent serve` on a free loopback port. `config` is the configuration object (written to
// <dir>/agent.json; `quiver.data_dir` defaults to <dir>); `env` is the agent's environment on top
// of PATH and HOME (secrets referenced by the config go here, never into the file).
// How long `start` waits for /healthz; longer under valgrind (bench/ profiles pass --agent a
// wrapper that runs the agent under callgrind).
const startTimeoutMs = Number(process.env.QUIVER_AGENT_START_MS || 20000);

export class Agent {
  static async start({ binary = defaultAgentBinary(), config, env = {}, logs = [],
                       logLevel = 'info', echo = false }) {
    const a = new Agent();
    a.binary = binary;
    a.logs = logs;
    a.dir = mkdtempSync(path.join(os.tmpdir(), 'quiver-agent-'));
    a.port = await freePort();
    const cfg = structuredClone(config);
    cfg.quiver = { data_dir: a.dir, ...(cfg.quiver ?? {}) };
    a.configFile = path.join(a.dir, 'agent.json');
    writeFileSync(a.configFile, JSON.stringify(cfg, null, 2));
    a.env = { PATH: process.env.PATH, HOME: process.env.HOME, ...env };
    a.proc = spawnTied(binary, ['serve', '--config', a.configFile, '--listen',
                                `127.0.0.1:${a.port}`, '--no-wait', '--log-level', logLevel],
                       { env: a.env });
    collect(a.proc.stdout, logs, echo);
    collect(a.proc.stderr, logs, echo);
    a.exited = new Promise((resolve) => a.proc.once('exit', resolve));
    const spawnError = new Promise((_, reject) => a.proc.once('exit', (code) => reject(
      new Error(`quiver-agent exited (${code})`))));
    spawnError.catch(() => {});
    a.http = new http.Agent({ keepAlive: true, maxSockets: 16 });
    try {
      await Promise.race([spawnError, waitFor('quiver-agent', async () =>
        (await a.request('GET', '/healthz')).status === 200, startTimeoutMs)]);
    } catch (e) {
      await a.stop();
      throw new Error(`${e.message}\n${logs.slice(-40).join('\n')}`);
    }
    return a;
  }

  request(method, pathAndQuery, opts = {}) {
    return httpRequest(this.port, method, pathAndQuery, { agent: this.http, ...opts });
  }

  // A caller token minted by the agent itself (`quiver-agent token`).
  token(member, ttl = '1h') {
    return execFileSync(this.binary, ['token', '--member', member, '--ttl', ttl, '--config',
                                      this.configFile], { env: this.env, encoding: 'utf8' }).trim();
  }

  // GET /metrics (no token from loopback) as {"name{labels}": value}.
  async metrics() {
    const res = await this.request('GET', '/metrics');
    const out = {};
    for (const line of res.text.split('\n')) {
      if (!line || line.startsWith('#')) continue;
      const i = line.lastIndexOf(' ');
      out[line.slice(0, i)] = Number(line.slice(i + 1));
    }
    return out;
  }

  async stop() {
    this.http?.destroy();
    await stopTied(this.proc, this.exited);
    this.proc = null;
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
    this.dir = null;
  }
}

// tests/peers/test-upstream.mjs in HTTP mode (flags: tests/peers/README.md). `url` is its MCP
// endpoint, `control` its control endpoint.
export class HttpUpstream {
  static async start(flags = [], { logs = [] } = {}) {
    const u = new HttpUpstream();
    u.proc = spawnTied(process.execPath, [testUpstreamScript, 'http', '--port', '0', '--quiet',
                                          ...flags],
                       { env: { ...process.env, QUIVER_NODE_MODULES: nodeModules() } });
    collect(u.proc.stderr, logs, false);
    u.exited = new Promise((resolve) => u.proc.once('exit', resolve));
    const first = new Promise((resolve, reject) => {
      readline.createInterface({ input: u.proc.stdout }).once('line', resolve);
      u.proc.once('exit', (code) => reject(new Error(`test-upstream exited (${code})`)));
    });
    const timer = new Promise((_, reject) => setTimeout(
      () => reject(new Error('test-upstream did not listen within 15 s')), 15000).unref());
    try {
      Object.assign(u, JSON.parse(await Promise.race([first, timer])));
    } catch (e) {
      await u.stop();
      throw new Error(`${e.message}\n${logs.join('\n')}`);
    }
    return u;
  }

  async stop() {
    await stopTied(this.proc, this.exited);
    this.proc = null;
  }
}

// The counters a test-upstream keeps in its --stats-file (null before its first write).
export function upstreamStats(file) {
  if (!existsSync(file)) return null;
  return JSON.parse(readFileSync(file, 'utf8'));
}
