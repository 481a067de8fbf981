#!/usr/bin/env node
// Proof against the official SDK client: real servers in both eras and both transports are listed
// by the TypeScript SDK 2.x client (`@modelcontextprotocol/client`, the reference) and by
// `quiver-agent probe`, and every definition of every list is compared with full JSON equality,
// in order. Numbers are compared as JavaScript reads them (the SDK client keeps nothing finer);
// that Quiver keeps their exact text is proven by tests/integration/modern_upstream_test.cpp.
//
//   node tests/integration/sdk_client_equality.mjs QUIVER_AGENT NODE_MODULES
//
// Servers (all on 127.0.0.1, all stopped at the end):
//   everything-stdio / everything-http    server-everything (2025-11-25)
//   paginated-stdio                       server-everything 2025.12.18 (100 resources, 10 a page)
//   sdk2-stdio / sdk2-http                tests/peers/sdk2-upstream.mjs (2026-07-28, 25 tools,
//                                         7 a page, an MCP Apps tool with _meta.ui)
//   sdk2-big-http                         the same with numbers beyond 64 bits (Node 22)
import { spawn, execFile } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { isDeepStrictEqual } from 'node:util';

const [agent, nodeModules] = process.argv.slice(2);
if (!agent || !nodeModules) {
  console.error('usage: sdk_client_equality.mjs QUIVER_AGENT NODE_MODULES');
  process.exit(2);
}
const here = path.dirname(fileURLToPath(import.meta.url));
const peers = path.resolve(here, '../peers');
const mod = (p) => import(pathToFileURL(path.join(nodeModules, p)).href);
const { Client, StreamableHTTPClientTransport } = await mod('@modelcontextprotocol/client/dist/index.mjs');
const { StdioClientTransport } = await mod('@modelcontextprotocol/client/dist/stdio.mjs');

const everything = path.join(nodeModules, '@modelcontextprotocol/server-everything/dist/index.js');
const paginated = path.join(nodeModules, 'server-everything-paginated/dist/index.js');
const sdk2 = path.join(peers, 'sdk2-upstream.mjs');
const node22 = path.join(nodeModules, 'node/bin/node');
const loopback = path.join(peers, 'loopback-only.cjs');

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

async function waitForPort(port, child) {
  for (let i = 0; i < 300; ++i) {
    if (child.exitCode !== null) throw new Error(`the server exited (${child.exitCode})`);
    const open = await new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1', () => { c.destroy(); resolve(true); });
      c.on('error', () => resolve(false));
    });
    if (open) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`nothing listens on ${port}`);
}

const children = [];
async function startHttp(argv, env, port) {
  const child = spawn(argv[0], argv.slice(1), { env: { ...process.env, ...env }, stdio: ['pipe', 'ignore', 'inherit'] });
  children.push(child);
  await waitForPort(port, child);
  return `http://127.0.0.1:${port}/mcp`;
}

const KINDS = [
  ['tools', 'tools', (c, p) => c.listTools(p)],
  ['resources', 'resources', (c, p) => c.listResources(p)],
  ['resource_templates', 'resourceTemplates', (c, p) => c.listResourceTemplates(p)],
  ['prompts', 'prompts', (c, p) => c.listPrompts(p)],
];
const CAPABILITY = { tools: 'tools', resources: 'resources', resource_templates: 'resources', prompts: 'prompts' };

// The reference: the official client (era negotiation on: `server/discover` first), every page
// of every advertised list. The definitions compared are the ones the client's transport
// received, before the client's own schema validation: that validation strips fields it does not
// know (a server-everything 2025.12.18 resource's `text`) and refuses values it cannot hold
// (`1e400`), so its typed result is not what the server sent.
async function listWithSdk(transport) {
  const client = new Client({ name: 'sdk-reference', version: '1.0.0' },
                            { versionNegotiation: { mode: 'auto' } });
  await client.connect(transport);
  const pages = [];
  const delivered = transport.onmessage;
  transport.onmessage = (message, extra) => {
    if (message && 'result' in message) pages.push(message.result);
    delivered.call(transport, message, extra);
  };
  const caps = client.getServerCapabilities() ?? {};
  const out = { version: client.getNegotiatedProtocolVersion() };
  for (const [kind, field, call] of KINDS) {
    if (!caps[CAPABILITY[kind]]) continue;
    const items = [];
    let cursor;
    do {
      const before = pages.length;
      try {
        await call(client, cursor ? { cursor } : {});
      } catch (e) {
        if (pages.length === before) throw e;  // nothing arrived: a real failure
      }
      // The 2.x client follows nextCursor itself: one call may bring several pages.
      const got = pages.slice(before).filter((r) => Array.isArray(r?.[field]));
      if (got.length === 0) throw new Error(`${kind}: no page on the wire`);
      for (const page of got) items.push(...page[field]);
      cursor = got[got.length - 1].nextCursor;
    } while (cursor);
    out[kind] = items;
  }
  await client.close();
  return out;
}

function probe(args) {
  return new Promise((resolve, reject) => {
    execFile(agent, ['probe', '--timeout-ms', '20000', ...args], { maxBuffer: 64 << 20 },
      (err, stdout, stderr) => {
        try {
          resolve(JSON.parse(stdout));
        } catch {
          reject(new Error(`probe printed no JSON (${err?.message ?? ''}): ${stderr.slice(0, 400)}`));
        }
      });
  });
}

const cases = [
  { name: 'everything-stdio', era: 'legacy',
    sdk: () => new StdioClientTransport({ command: 'node', args: [everything, 'stdio'] }),
    quiver: () => ['--stdio', `node ${everything} stdio`] },
  { name: 'paginated-stdio', era: 'legacy',
    sdk: () => new StdioClientTransport({ command: 'node', args: [paginated, 'stdio'] }),
    quiver: () => ['--stdio', `node ${paginated} stdio`] },
  { name: 'everything-http', era: 'legacy',
    start: async () => { const port = await freePort(); return startHttp(['node', '-r', loopback, everything, 'streamableHttp'], { PORT: String(port) }, port); },
    sdk: (url) => new StreamableHTTPClientTransport(new URL(url)),
    quiver: (url) => ['--url', url, '--allow-private'] },
  { name: 'sdk2-stdio', era: 'modern',
    sdk: () => new StdioClientTransport({ command: 'node', args: [sdk2, 'stdio', '--tools', '25', '--page-size', '7'] }),
    quiver: () => ['--stdio', `node ${sdk2} stdio --tools 25 --page-size 7`] },
  { name: 'sdk2-http', era: 'modern',
    start: async () => { const port = await freePort(); return startHttp(['node', sdk2, 'http', '--port', String(port), '--tools', '25', '--page-size', '7'], {}, port); },
    sdk: (url) => new StreamableHTTPClientTransport(new URL(url)),
    quiver: (url) => ['--url', url, '--allow-private'] },
  { name: 'sdk2-big-http', era: 'modern',
    start: async () => { const port = await freePort(); return startHttp([node22, sdk2, 'http', '--port', String(port), '--big-numbers'], {}, port); },
    sdk: (url) => new StreamableHTTPClientTransport(new URL(url)),
    quiver: (url) => ['--url', url, '--allow-private'] },
];

let passed = 0;
let failed = 0;
for (const c of cases) {
  const problems = [];
  try {
    const url = c.start ? await c.start() : undefined;
    const reference = await listWithSdk(c.sdk(url));
    const report = await probe(c.quiver(url));
    if (report.status !== 'ok') problems.push(`probe status ${report.status}`);
    if (report.era !== c.era) problems.push(`era ${report.era}, expected ${c.era}`);
    if (report.protocol_version !== reference.version) {
      problems.push(`protocol ${report.protocol_version} vs the SDK's ${reference.version}`);
    }
    let compared = 0;
    for (const [kind] of KINDS) {
      const ours = report.manifest?.[kind]?.items ?? [];
      const theirs = reference[kind] ?? [];
      if (ours.length !== theirs.length) {
        problems.push(`${kind}: ${ours.length} items vs the SDK's ${theirs.length}`);
        continue;
      }
      for (let i = 0; i < ours.length; ++i) {
        if (!isDeepStrictEqual(ours[i], theirs[i])) {
          problems.push(`${kind}[${i}] differs:\n    quiver ${JSON.stringify(ours[i])}\n    sdk    ${JSON.stringify(theirs[i])}`);
        }
        ++compared;
      }
    }
    if (compared === 0) problems.push('no definitions compared');
    if (problems.length === 0) console.log(`ok   ${c.name}: ${compared} definitions equal (${report.protocol_version})`);
  } catch (e) {
    problems.push(String(e?.stack ?? e));
  }
  if (problems.length) {
    console.log(`FAIL ${c.name}`);
    for (const p of problems) console.log(`  ${p}`);
    ++failed;
  } else {
    ++passed;
  }
}
for (const child of children) {
  child.stdin?.on('error', () => {});
  child.kill('SIGTERM');
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
