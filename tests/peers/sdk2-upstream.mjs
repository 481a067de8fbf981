#!/usr/bin/env node
// A 2026-07-28 MCP upstream built on the official TypeScript SDK 2.x (`@modelcontextprotocol/server`),
// served the way that SDK serves: `serveStdio` for stdio, `createMcpHandler` (its web-standard
// fetch handler, bridged to node:http here) for Streamable HTTP. Both eras are served from one
// factory, as the SDK recommends; the cache hints are the SDK's own `cacheHints` option, so they
// appear on 2026-07-28 results only (the SDK never puts them on 2025-era answers).
//
//   node sdk2-upstream.mjs stdio [--tools N] [--page-size K] [--control FILE] [--big-numbers]
//   node sdk2-upstream.mjs http --port 0 [...]      # prints {"url":"http://127.0.0.1:P/mcp"}
//
// Flags and the control channel: tests/peers/README.md. `--big-numbers` needs Node 22
// (`JSON.rawJSON`, to write numbers a JavaScript double cannot hold); run this script with
// build/node/node_modules/.bin/node for it.
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const nodeModules =
  process.env.QUIVER_NODE_MODULES || path.resolve(here, '../../build/node/node_modules');
const load = (p) => import(pathToFileURL(path.join(nodeModules, '@modelcontextprotocol/server', p)).href);
const { Server, createMcpHandler } = await load('dist/index.mjs');
const { serveStdio } = await load('dist/stdio.mjs');

const o = { transport: process.argv[2], port: 0, tools: 3, pageSize: 0, control: null,
            bigNumbers: false, ttlMs: 120000, cacheScope: 'public' };
for (let i = 3; i < process.argv.length; ++i) {
  const a = process.argv[i];
  const next = () => process.argv[++i];
  if (a === '--port') o.port = Number(next());
  else if (a === '--tools') o.tools = Number(next());
  else if (a === '--page-size') o.pageSize = Number(next());
  else if (a === '--control') o.control = next();
  else if (a === '--big-numbers') o.bigNumbers = true;
  else if (a === '--ttl-ms') o.ttlMs = Number(next());
  else if (a === '--cache-scope') o.cacheScope = next();
  else { console.error(`sdk2-upstream: unknown flag ${a}`); process.exit(2); }
}
if (o.transport !== 'stdio' && o.transport !== 'http') {
  console.error('usage: sdk2-upstream.mjs stdio|http [flags]   (see tests/peers/README.md)');
  process.exit(2);
}
if (o.bigNumbers && typeof JSON.rawJSON !== 'function') {
  console.error('sdk2-upstream: --big-numbers needs JSON.rawJSON (Node 22): run it with build/node/node_modules/.bin/node');
  process.exit(2);
}

// ---- what it serves ----

const tools = [];
for (let i = 1; i <= o.tools; ++i) {
  tools.push({ name: `tool_${i}`, description: `tool number ${i}`,
               inputSchema: { type: 'object', properties: { n: { type: 'integer', minimum: i } } } });
}
// An MCP Apps-style tool: its UI resource is named in `_meta.ui`.
tools.push({ name: 'show_chart', description: 'renders a chart in the host',
             inputSchema: { type: 'object', properties: { series: { type: 'array', items: { type: 'number' } } } },
             _meta: { ui: { resourceUri: 'ui://charts/chart.html' } } });
if (o.bigNumbers) {
  // Literals a double cannot carry, or that it would rewrite: they must arrive as written.
  const raw = JSON.rawJSON;
  tools.push({ name: 'big_numbers', description: 'numbers beyond 64 bits and doubles',
               inputSchema: { type: 'object', properties: {
                 id: { type: 'integer', maximum: raw('123456789012345678901234567890'),
                       minimum: raw('-98765432109876543210987654321') },
                 ratio: { type: 'number', multipleOf: raw('0.1000000000000000055511151231257827'),
                          default: raw('1.0') },
                 huge: { type: 'number', maximum: raw('1e400') },
                 small: { type: 'number', exclusiveMinimum: raw('1E-7') },
                 plain: { type: 'integer', maximum: raw('9007199254740993') },
                 zeros: { type: 'number', minimum: raw('-0'), maximum: raw('-0.0'),
                          default: raw('0e5'), multipleOf: raw('-0E-3') } } } });
}
const resources = [{ uri: 'test://sdk2/readme', name: 'readme', mimeType: 'text/plain' }];
const prompts = [{ name: 'greet', description: 'says hello' }];

function page(items, cursor, key) {
  const start = cursor === undefined ? 0 : Number(Buffer.from(cursor, 'base64url').toString());
  if (!Number.isInteger(start) || start < 0 || start > items.length) throw new Error('bad cursor');
  const size = o.pageSize > 0 ? o.pageSize : items.length;
  const out = { [key]: items.slice(start, start + size) };
  if (start + size < items.length) out.nextCursor = Buffer.from(String(start + size)).toString('base64url');
  return out;
}

const hint = { ttlMs: o.ttlMs, cacheScope: o.cacheScope };
const live = new Set();  // server instances (stdio: the pinned one) to tell about changes
function factory() {
  const server = new Server({ name: 'quiver-sdk2-upstream', version: '2.4.0-test' }, {
    capabilities: { tools: { listChanged: true }, resources: { listChanged: true }, prompts: {} },
    cacheHints: { 'tools/list': hint, 'resources/list': hint, 'resources/templates/list': hint,
                  'prompts/list': hint },
  });
  server.setRequestHandler('tools/list', (req) => page(tools, req.params?.cursor, 'tools'));
  server.setRequestHandler('resources/list', (req) => page(resources, req.params?.cursor, 'resources'));
  server.setRequestHandler('resources/templates/list', () => ({ resourceTemplates: [] }));
  server.setRequestHandler('prompts/list', (req) => page(prompts, req.params?.cursor, 'prompts'));
  server.setRequestHandler('tools/call', () => ({ content: [{ type: 'text', text: 'ok' }] }));
  live.add(server);
  server.onclose = () => live.delete(server);
  return server;
}

// ---- serving ----

let handler = null;
const listens = new Set();  // HTTP: the open subscriptions/listen responses (for drop_listens)
if (o.transport === 'stdio') {
  serveStdio(factory, { onerror: (e) => console.error(`sdk2-upstream: ${e.message}`) });
} else {
  handler = createMcpHandler(factory, { onerror: (e) => console.error(`sdk2-upstream: ${e.message}`) });
  const server = http.createServer(async (req, res) => {
    try {
      const chunks = [];
      for await (const c of req) chunks.push(c);
      const body = Buffer.concat(chunks);
      const headers = new Headers();
      for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i], req.rawHeaders[i + 1]);
      const ac = new AbortController();
      res.on('close', () => { ac.abort(); listens.delete(res); });
      res.on('error', () => {});  // a write after drop_listens cut the socket
      if (req.headers['mcp-method'] === 'subscriptions/listen') listens.add(res);
      const request = new Request(`http://127.0.0.1${req.url}`, {
        method: req.method, headers, signal: ac.signal,
        body: req.method === 'GET' || req.method === 'HEAD' || body.length === 0 ? undefined : body });
      const response = await handler.fetch(request);
      res.writeHead(response.status, Object.fromEntries(response.headers));
      if (response.body) {
        for await (const chunk of response.body) res.write(chunk);
      }
      res.end();
    } catch (e) {
      if (!res.headersSent) res.writeHead(500);
      res.end();
    }
  });
  server.listen(o.port, '127.0.0.1', () => {
    process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}/mcp` }) + '\n');
  });
  process.stdin.on('end', () => process.exit(0));  // the test that started us is gone
  process.stdin.resume();
}

// ---- control channel: one JSON object per line, e.g. {"add_tool":"fresh_tool"} ----

function toolsChanged() {
  if (handler) handler.notify.toolsChanged();
  for (const s of live) s.sendToolListChanged().catch(() => {});
}
if (o.control) {
  let done = 0;
  fs.writeFileSync(o.control, '', { flag: 'a' });
  setInterval(() => {
    const lines = fs.readFileSync(o.control, 'utf8').split('\n');
    for (; done < lines.length - 1; ++done) {
      const cmd = JSON.parse(lines[done]);
      if (cmd.drop_listens) {
        // A broken subscription (a proxy or the network cut the stream): the sockets close
        // without the request's response. First, so that a change in the same
        // command falls in the gap.
        for (const res of listens) res.destroy();
        listens.clear();
      }
      if (cmd.add_tool) {
        tools.push({ name: cmd.add_tool, description: cmd.description ?? 'added at runtime',
                     inputSchema: { type: 'object' } });
        toolsChanged();
      }
    }
  }, 50).unref();
}
