#!/usr/bin/env node
// Runs server scenarios of the official MCP conformance suite (@modelcontextprotocol/conformance,
// `conformance server --url URL`) against the /mcp of the agent or of the edge
// (shared/mcp_endpoint.h): the suite is the client. README.md here lists the scenarios that
// apply, which checks each must pass, and why the others do not apply.
//
//   node tests/conformance/server.mjs --agent QUIVER_AGENT [--edge-dir DIR] [--list] [SCENARIO...]
//
// `quiver-agent serve` holds one real upstream, server-everything (stdio), granted to the member
// `conformance`: on embedded SQLite, the suite talking to the agent; with --edge-dir (the staged
// quiver-edge, scripts/edge-build.sh), on a real redis-server, the suite talking to that edge in
// workerd (the same Redis, as the edge's least-privilege user: tests/edge/harness.mjs), whose
// calls the agent performs through the Redis relay (edge → Redis → agent). The suite sends no
// credentials, so it talks to the server through a small reverse proxy started here that adds the
// member's bearer token to each request and passes everything else through unchanged (method,
// path, every header including Host and Origin, the body, and the answer as it streams). Run
// inside a private network namespace by server.sh (as run.sh runs the client scenarios); every
// process here binds 127.0.0.1.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

import { Agent, agentBinaryOrSkip, nodeModules } from '../edge/agent.mjs';
import { argValue, edgeEnv, startEdgeRedis, startEdges, waitFor } from '../edge/harness.mjs';

// Each scenario that applies: `expect`, checks that must be SUCCESS (beyond "no FAILURE");
// `allow`, checks that may be WARNING; `untestable`, checks the suite can only exercise through
// diagnostic tools of its own reference server (`test_missing_capability`, `test_logging_tool`,
// ...), which an aggregator of real upstreams does not have: their FAILURE is accepted only when
// the suite itself says "Not testable". README.md gives each reason.
export const SCENARIOS = {
  'server-initialize': { expect: ['server-initialize'] },
  // Stateless (no Mcp-Session-Id): the suite reports the lifecycle as not applicable (INFO).
  'server-session-lifecycle': { expect: [], info: ['server-session-lifecycle-skipped'] },
  'ping': { expect: ['ping'] },
  'tools-list': { expect: ['tools-list', 'tools-name-format'] },
  'resources-list': { expect: ['resources-list'] },
  'prompts-list': { expect: ['prompts-list'] },
  // `status`: the HTTP status a check's details must show (the agent refuses the foreign Host).
  'dns-rebinding-protection': {
    expect: ['localhost-host-rebinding-rejected', 'localhost-host-valid-accepted'],
    status: { 'localhost-host-rebinding-rejected': 421 } },
  'caching': { expect: ['sep-2549-tools-list-caching-hints', 'sep-2549-resources-read-caching-hints',
                        'sep-2549-ttl-non-negative', 'sep-2549-cache-scope-valid'] },
  'http-header-validation': { expect: ['sep-2243-server-reject-invalid-headers'] },
  'sep-2164-resource-not-found': { expect: ['sep-2164-error-code', 'sep-2164-no-empty-contents'] },
  'server-stateless': {
    expect: ['sep-2575-server-implements-discover', 'sep-2575-server-sends-subscription-ack',
             'sep-2575-server-tags-subscription-id', 'sep-2575-server-honors-notification-filter',
             'sep-2575-http-server-method-not-found-404', 'sep-2575-http-server-header-mismatch-400',
             'sep-2575-server-unsupported-version-error', 'sep-2575-request-meta-invalid-missing-meta'],
    untestable: ['sep-2575-server-rejects-undeclared-capability',
                 'sep-2575-missing-capability-http-400',
                 'sep-2575-http-server-no-independent-requests-on-stream',
                 'sep-2575-server-no-log-without-loglevel'],
    // The suite mutates the lists through `test_trigger_tool_change` / `_prompt_change`, tools of
    // its reference server; the agent's notifications are tested with real upstreams in
    // tests/integration/mcp_endpoint_notify.mjs.
    allow: ['sep-2575-server-sends-prompts-list-changed-on-subscription',
            'sep-2575-server-sends-tools-list-changed-on-subscription'],
  },
};

// The edge's differences (README.md, "Server scenarios against the edge"). It sends no change
// notifications: its capabilities say `listChanged: false` and `subscriptions/listen` is -32601,
// which the suite itself judges not applicable (SKIPPED, with the note given here) for a server
// that does not offer them. `skipped`: checks that must be SKIPPED, each for that reason only.
const NO_SUBSCRIPTIONS = /advertises no subscription-delivered capability/;
const listen = ['sep-2575-server-sends-subscription-ack', 'sep-2575-server-tags-subscription-id',
                'sep-2575-server-honors-notification-filter'];
export const EDGE_SCENARIOS = {
  ...SCENARIOS,
  // `relayed`: methods the scenario calls, which must have gone edge → Redis (the calls stream)
  // → the agent (its consumer group read them): the suite's check passing means the agent's
  // answer came back through the edge.
  'caching': { ...SCENARIOS.caching, relayed: ['resources/read'] },
  // The edge refuses the foreign Origin (shared/mcp_endpoint.h mcp_origin_refusal).
  'dns-rebinding-protection': {
    ...SCENARIOS['dns-rebinding-protection'],
    status: { 'localhost-host-rebinding-rejected': 403 } },
  'server-stateless': {
    ...SCENARIOS['server-stateless'],
    expect: SCENARIOS['server-stateless'].expect.filter((id) => !listen.includes(id)),
    skipped: {
      ...Object.fromEntries(listen.map((id) => [id, NO_SUBSCRIPTIONS])),
      'sep-2575-server-sends-prompts-list-changed-on-subscription':
        /did not declare prompts\.listChanged/,
      'sep-2575-server-sends-tools-list-changed-on-subscription':
        /did not declare tools\.listChanged/,
    },
    allow: [],
  },
};

const argv = process.argv.slice(2);
const positional = [];
for (let i = 0; i < argv.length; ++i) {
  if (argv[i] === '--agent' || argv[i] === '--edge-dir') { ++i; continue; }
  if (argv[i].startsWith('--')) continue;
  positional.push(argv[i]);
}
const listOnly = argv.includes('--list');
const binary = agentBinaryOrSkip();
const edgeDir = argValue('--edge-dir', '') && path.resolve(argValue('--edge-dir', ''));
if (edgeDir && !existsSync(path.join(edgeDir, 'workerd.capnp'))) {
  console.log(`SKIP: no staged quiver-edge in ${edgeDir} (build the wasm tree's quiver_edge_stage)`);
  process.exit(77);
}
const nm = nodeModules();
const node22 = path.join(nm, 'node', 'bin', 'node');
const suite = path.join(nm, '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
const KEY = 'conformance-server-key-0123456789abcdef';
const NS = 'conformance';
const EDGE_REDIS_PASSWORD = 'conformance-edge-redis-password-0123';
const logs = [];
const table = edgeDir ? EDGE_SCENARIOS : SCENARIOS;

function findChecks(dir) {
  for (const name of readdirSync(dir)) {
    const p = path.join(dir, name);
    if (statSync(p).isDirectory()) {
      const found = findChecks(p);
      if (found) return found;
    } else if (name === 'checks.json') {
      return p;
    }
  }
  return null;
}

function runSuite(args, out) {
  return new Promise((resolve) => {
    const child = spawn(node22, [suite, ...args, '-o', out], { stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    child.stdout.on('data', (d) => { text += d; });
    child.stderr.on('data', (d) => { text += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), 90000);
    child.on('exit', (code) => { clearTimeout(timer); resolve({ code, text }); });
  });
}

// The proxy: the suite's requests, with the caller token added.
function startProxy(agentPort, token) {
  const server = http.createServer((req, res) => {
    const headers = { ...req.headers, authorization: `Bearer ${token}` };
    const up = http.request({ host: '127.0.0.1', port: agentPort, method: req.method,
                              path: req.url, headers }, (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    });
    up.on('error', () => { if (!res.headersSent) res.writeHead(502); res.end(); });
    req.pipe(up);
    res.on('close', () => up.destroy());
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

// What is wrong with the calls the edge relayed so far (`methods` each at least once, every one
// read by the agents' consumer group), from Redis itself (schema/redis-keys.md, `calls`).
async function relayProblems(db, methods) {
  const stream = `quiver:{${NS}}:calls`;
  const entries = await db.call('XRANGE', stream, '-', '+');
  const sent = entries.map(([, fields]) => fields[fields.indexOf('method') + 1]);
  const problems = methods.filter((m) => !sent.includes(m))
    .map((m) => `${m}: not relayed through Redis (the calls stream holds ${JSON.stringify(sent)})`);
  const groups = await db.call('XINFO', 'GROUPS', stream);
  const read = groups.map((g) => g[g.indexOf('entries-read') + 1]);
  if (!read.some((n) => n === entries.length)) {
    problems.push(`the agents read ${JSON.stringify(read)} of ${entries.length} relayed calls`);
  }
  return problems;
}

async function main() {
  if (listOnly) {
    console.log(Object.keys(table).join('\n'));
    return 0;
  }
  if (!existsSync(node22) || !existsSync(suite)) {
    console.log(`server.mjs: no suite or Node 22 in ${nm} (run scripts/setup.sh)`);
    return 1;
  }
  const scenarios = positional.length ? positional : Object.keys(table);
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'quiver-conformance-server-'));
  let agent;
  let redis;
  let db;
  let edge;
  let proxy;
  let failed = 0;
  try {
    const quiver = { caller_token_keys: { k1: { env: 'CONFORMANCE_KEY' } },
                     members: ['conformance'], grants: { conformance: ['everything'] } };
    if (edgeDir) {
      ({ redis, db } = await startEdgeRedis(NS, EDGE_REDIS_PASSWORD));
      quiver.namespace = NS;
      quiver.redis = `redis://127.0.0.1:${redis.port}/0`;
    }
    agent = await Agent.start({
      binary, logs, env: { CONFORMANCE_KEY: KEY },
      config: {
        mcpServers: {
          everything: { command: process.execPath,
                        args: [`${nm}/@modelcontextprotocol/server-everything/dist/index.js`, 'stdio'] },
        },
        quiver,
      },
    });
    // What the suite talks to: the agent, or the edge on the agent's Redis.
    let server = agent;
    if (edgeDir) {
      const env = edgeEnv({ ns: NS, kid: 'k1', secret: KEY, redisPort: redis.port,
                            edgeRedisPassword: EDGE_REDIS_PASSWORD, l1TtlMs: 500 });
      [edge] = await startEdges(1, { edgeDir, env, logs });
      server = edge;
    }
    const token = agent.token('conformance');
    // The agent has listed the upstream, and the server the suite talks to shows it.
    await waitFor('everything listed', async () => {
      const r = await server.request('GET', '/v1/manifests',
                                     { headers: { authorization: `Bearer ${token}` } });
      return r.status === 200 && r.json.connections[0]?.status === 'fresh';
    }, 30000);
    proxy = await startProxy(server.port, token);
    const url = `http://127.0.0.1:${proxy.address().port}/mcp`;
    for (const scenario of scenarios) {
      const want = table[scenario];
      const out = path.join(tmp, scenario.replace(/[/:]/g, '_'));
      const { text } = await runSuite(['server', '--url', url, '--scenario', scenario,
                                       '--timeout', '30000'], tmp);
      const checksFile = existsSync(tmp) ? findChecks(tmp) : null;
      if (!checksFile) {
        failed++;
        console.log(`FAIL  ${scenario}: the suite wrote no checks.json\n${text}`);
        continue;
      }
      const checks = JSON.parse(readFileSync(checksFile, 'utf8'));
      rmSync(path.dirname(checksFile), { recursive: true, force: true });
      const problems = [];
      for (const c of checks) {
        const untestable = (want?.untestable ?? []).includes(c.id) &&
          /^Not testable/.test(c.errorMessage ?? '');
        if (c.status === 'FAILURE' && !untestable) {
          problems.push(`FAILURE ${c.id}: ${c.errorMessage ?? c.description}`);
        }
        if (c.status === 'WARNING' && !(want?.allow ?? []).includes(c.id)) {
          problems.push(`WARNING ${c.id}: ${c.errorMessage ?? c.description}`);
        }
      }
      for (const id of want?.info ?? []) {
        if (!checks.some((c) => c.id === id && c.status === 'INFO')) problems.push(`${id}: not INFO`);
      }
      for (const [id, why] of Object.entries(want?.skipped ?? {})) {
        const c = checks.find((x) => x.id === id);
        if (c?.status !== 'SKIPPED' || !why.test(c.details?.note ?? '')) {
          problems.push(`${id}: not SKIPPED as not applicable (${c?.status}: ` +
                        `${c?.errorMessage ?? c?.details?.note ?? 'absent'})`);
        }
      }
      for (const [id, status] of Object.entries(want?.status ?? {})) {
        const c = checks.find((x) => x.id === id);
        if (c?.details?.statusCode !== status) {
          problems.push(`${id}: HTTP ${c?.details?.statusCode}, not ${status}`);
        }
      }
      if (want?.relayed) problems.push(...await relayProblems(db, want.relayed));
      for (const id of want?.expect ?? []) {
        if (!checks.some((c) => c.id === id && c.status === 'SUCCESS')) problems.push(`${id}: not SUCCESS`);
      }
      if (!want) problems.push('not a scenario that applies (README.md)');
      const summary = checks.map((c) => `${c.id}=${c.status}`).join(' ');
      if (problems.length) {
        failed++;
        console.log(`FAIL  ${scenario}\n  ${problems.join('\n  ')}\n  (${summary})`);
      } else {
        console.log(`ok    ${scenario} (${summary})`);
      }
      void out;
    }
  } finally {
    proxy?.close();
    db?.close();
    await edge?.stop();
    await agent?.stop();
    await redis?.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
  if (failed) console.log(logs.slice(-30).join('\n'));
  return failed ? 1 : 0;
}

main().then((code) => process.exit(code), (e) => {
  console.log(`${e.stack ?? e}\n${logs.slice(-30).join('\n')}`);
  process.exit(1);
});
