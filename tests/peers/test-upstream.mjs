#!/usr/bin/env node
// A controllable MCP upstream for Quiver's tests, built on the official SDK's low-level Server.
//
// It does on demand what real servers do by accident: paginate, delay, hang, fail a method,
// garble or bloat a reply, drip it out a few bytes at a time, expire HTTP sessions, answer per
// Authorization header, add and remove tools at runtime (with list_changed), and count the list
// calls it served. Flags, the control channel and the stats format: tests/peers/README.md.
//
//   node test-upstream.mjs stdio --tools 25 --page-size 10 --control /tmp/ctl --stats-file /tmp/st
//   node test-upstream.mjs http --port 0 --session-ttl-ms 500   # prints {"url":...} on stdout
//
// Imports resolve from build/node/node_modules (scripts/setup.sh); NODE_PATH does not apply to
// ESM, so the SDK is located relative to this file (override with QUIVER_NODE_MODULES).
import { createHash, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath, pathToFileURL } from 'node:url';

// Taken before the (slow) SDK import: if the parent dies during start-up, we still notice.
const parentAtStart = process.ppid;
const here = path.dirname(fileURLToPath(import.meta.url));
const nodeModules =
  process.env.QUIVER_NODE_MODULES || path.resolve(here, '../../build/node/node_modules');
const sdk = (p) => import(pathToFileURL(path.join(nodeModules, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Server } = await sdk('server/index.js');
const { StdioServerTransport } = await sdk('server/stdio.js');
const { StreamableHTTPServerTransport } = await sdk('server/streamableHttp.js');
const types = await sdk('types.js');
const { McpError, ErrorCode } = types;

// ---- options ----

const USAGE = `usage: test-upstream.mjs stdio|http [options]   (see tests/peers/README.md)`;
const ECHO_PLACES = new Set(['initialize', 'tools/list', 'listing']);

function parseArgs(argv) {
  const o = {
    transport: null,
    port: 0,
    tools: 3,
    resources: 2,
    templates: 1,
    prompts: 2,
    pageSize: 0,
    delayMs: 0,
    hang: false,
    failMethod: null,
    failCode: -32603,
    noPrompts: false,
    noResources: false,
    completions: false,
    garble: false,
    oversizeBytes: 0,
    slowDrip: false,
    dripBytes: 5,
    dripIntervalMs: 5,
    sessionTtlMs: 0,
    perAuth: false,
    authUsers: ['alice', 'bob'],
    ttlMs: undefined,
    cacheScope: undefined,
    control: null,
    statsFile: null,
    maxLifetimeMs: 10 * 60 * 1000,
    jsonResponse: false,
    stateless: false,
    quiet: false,
    echoOn: [],
    echoEnv: [],
    echoPad: 0,
    deepReply: 0,
    deepNotify: 0,
    cursorBytes: 0,
    cursorCycle: 0,
    emptyLastCursor: false,
  };
  const flags = {
    '--port': ['port', Number],
    '--tools': ['tools', Number],
    '--resources': ['resources', Number],
    '--templates': ['templates', Number],
    '--prompts': ['prompts', Number],
    '--page-size': ['pageSize', Number],
    '--delay-ms': ['delayMs', Number],
    '--fail-method': ['failMethod', String],
    '--fail-code': ['failCode', Number],
    '--oversize-bytes': ['oversizeBytes', Number],
    '--drip-bytes': ['dripBytes', Number],
    '--drip-interval-ms': ['dripIntervalMs', Number],
    '--session-ttl-ms': ['sessionTtlMs', Number],
    '--auth-users': ['authUsers', (s) => s.split(',').filter(Boolean)],
    '--ttl-ms': ['ttlMs', Number],
    '--cache-scope': ['cacheScope', String],
    '--control': ['control', String],
    '--stats-file': ['statsFile', String],
    '--max-lifetime-ms': ['maxLifetimeMs', Number],
    '--echo-on': ['echoOn', (s) => s.split(',').filter(Boolean)],
    '--echo-env': ['echoEnv', (s) => s.split(',').filter(Boolean)],
    '--echo-pad': ['echoPad', Number],
    '--deep-reply': ['deepReply', Number],
    '--deep-notify': ['deepNotify', Number],
    '--cursor-bytes': ['cursorBytes', Number],
    '--cursor-cycle': ['cursorCycle', Number],
  };
  const switches = {
    '--hang': 'hang',
    '--no-prompts': 'noPrompts',
    '--no-resources': 'noResources',
    '--completions': 'completions',
    '--garble': 'garble',
    '--slow-drip': 'slowDrip',
    '--per-auth': 'perAuth',
    '--json-response': 'jsonResponse',
    '--stateless': 'stateless',
    '--quiet': 'quiet',
    '--empty-last-cursor': 'emptyLastCursor',
  };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (a === 'stdio' || a === 'http') o.transport = a;
    else if (switches[a]) o[switches[a]] = true;
    else if (flags[a]) {
      if (i + 1 >= argv.length) fail(`${a} needs a value`);
      const [key, conv] = flags[a];
      const v = conv(argv[++i]);
      if (typeof v === 'number' && !Number.isFinite(v)) fail(`${a}: not a number`);
      o[key] = v;
    } else fail(`unknown argument: ${a}`);
  }
  if (!o.transport) fail('say stdio or http');
  for (const e of o.echoOn) {
    if (!ECHO_PLACES.has(e)) fail(`--echo-on: ${e} is not one of ${[...ECHO_PLACES].join(', ')}`);
  }
  if (o.cacheScope && o.cacheScope !== 'public' && o.cacheScope !== 'private') {
    fail('--cache-scope is public or private');
  }
  return o;
}

function fail(message) {
  process.stderr.write(`test-upstream: ${message}\n${USAGE}\n`);
  process.exit(2);
}

const opts = parseArgs(process.argv.slice(2));
const log = (m) => opts.quiet || process.stderr.write(`test-upstream[${process.pid}]: ${m}\n`);

// ---- state: the lists, the counters ----

const LIST_METHODS = new Set(['tools/list', 'resources/list', 'resources/templates/list', 'prompts/list']);

function makeTool(name, description) {
  return {
    name,
    description: description ?? `Test tool ${name}`,
    inputSchema: { type: 'object', properties: { value: { type: 'string' } } },
  };
}

const state = {
  tools: Array.from({ length: opts.tools }, (_, i) => makeTool(`tool_${i + 1}`)),
  resources: Array.from({ length: opts.resources }, (_, i) => ({
    uri: `test://resource/${i + 1}`,
    name: `resource_${i + 1}`,
    mimeType: 'text/plain',
  })),
  resourceTemplates: Array.from({ length: opts.templates }, (_, i) => ({
    uriTemplate: `test://template/${i + 1}/{id}`,
    name: `template_${i + 1}`,
  })),
  prompts: Array.from({ length: opts.prompts }, (_, i) => ({
    name: `prompt_${i + 1}`,
    description: `Test prompt ${i + 1}`,
    arguments: [{ name: 'topic', required: false }],
  })),
};

const stats = {
  calls: {}, sessions: { created: 0, expired: 0, open: 0 }, control: 0, called: [], served: [],
};

function countCall(method) {
  stats.calls[method] = (stats.calls[method] ?? 0) + 1;
  writeStats();
}

function statsSnapshot() {
  return {
    pid: process.pid,
    calls: stats.calls,
    tools_list_calls: stats.calls['tools/list'] ?? 0,
    sessions: stats.sessions,
    control_commands: stats.control,
    tools: state.tools.map((t) => t.name),
    called_tools: stats.called,
    served: stats.served,
  };
}

function writeStats() {
  if (!opts.statsFile) return;
  const tmp = `${opts.statsFile}.${process.pid}.tmp`;
  try {
    fs.writeFileSync(tmp, JSON.stringify(statsSnapshot()) + '\n');
    fs.renameSync(tmp, opts.statsFile);
  } catch (e) {
    log(`cannot write stats: ${e.message}`);
  }
}

// ---- echo: an upstream that quotes the credentials it was sent ----
//
// Careless servers put what they were sent into what they answer ("refused credential Bearer
// …"). --echo-on initialize,tools/list fails those requests with an error quoting every
// credential; --echo-on listing puts the quote into serverInfo.version, the instructions and
// every tool's title and description. Over HTTP the credentials are the request's non-protocol
// headers (Authorization, X-API-Key, custom ones) and `?echo=a,b` on the URL overrides the flag
// (one upstream serves several connections); over stdio they are the values of the --echo-env
// variables. Each value is quoted in the forms a transport or a careless server produces: as is,
// upper-cased, base64 (aligned and shifted), base64url, percent-encoded, JSON-encoded, and the
// token after a scheme (`Bearer x` → x) on its own in base64 and percent-encoding.
// --echo-pad N puts N dots before the quote (a secret placed across a client's message cut).

const PROTOCOL_HEADERS = new Set([
  'host', 'connection', 'keep-alive', 'content-type', 'content-length', 'transfer-encoding',
  'accept', 'accept-encoding', 'accept-language', 'user-agent', 'mcp-session-id',
  'mcp-protocol-version', 'mcp-method', 'mcp-name', 'last-event-id', 'te',
]);

// HTTP: `?echo=a,b` on the URL that opened the session; else --echo-on.
function echoPlaces(url) {
  const q = url?.searchParams?.get('echo');
  return q !== undefined && q !== null ? q.split(',').filter(Boolean) : opts.echoOn;
}

function credentialsSent(extra) {
  if (opts.transport === 'http') {
    const headers = extra?.requestInfo?.headers ?? {};
    return Object.entries(headers)
      .filter(([name]) => !PROTOCOL_HEADERS.has(name.toLowerCase()))
      .map(([, v]) => String(v));
  }
  return opts.echoEnv.map((n) => process.env[n]).filter((v) => v);
}

function echoText(values) {
  const forms = [];
  const b64 = (s, enc = 'base64') => Buffer.from(s, 'utf8').toString(enc);
  for (const v of values) {
    forms.push(v, v.toUpperCase(), b64(v), b64(v, 'base64url'), b64(`x${v}`), b64(`xy${v}`),
      encodeURIComponent(v), JSON.stringify(v));
    const space = v.indexOf(' ');
    if (space > 0) {
      const token = v.slice(space + 1);
      forms.push(b64(token), encodeURIComponent(token), b64(`user:${token}`));
    }
  }
  return `${'.'.repeat(opts.echoPad)}refused credential ${forms.join(' | ')}`;
}

// ---- one MCP Server (one per HTTP session, one for stdio) ----

const servers = new Set();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// "Bearer alice" → "alice" when alice is an allowed user, else null. "Bearer alice.<key>" is
// alice too: a credential that is not the user's name, so that names made from the user (tools
// `alice_tool_1`) do not quote the credential (an agent redacts every quote of a secret).
function bearerUser(header) {
  const m = /^Bearer ([A-Za-z0-9._-]{1,64})$/.exec(header ?? '');
  const user = m ? m[1].split('.')[0] : null;
  return user && opts.authUsers.includes(user) ? user : null;
}

// The credential a request came with: the Authorization header (HTTP) or
// TEST_UPSTREAM_AUTHORIZATION (stdio), or null.
function authorizationOf(extra) {
  const header = opts.transport === 'http'
    ? extra?.requestInfo?.headers?.authorization
    : process.env.TEST_UPSTREAM_AUTHORIZATION;
  return typeof header === 'string' && header ? header : null;
}

function principalPrefix(extra) {
  if (!opts.perAuth) return '';
  const user = bearerUser(authorizationOf(extra));
  return user ? `${user}_` : '';
}

// A call served (tools/call, resources/read, prompts/get, completion/complete), recorded in
// `served` with what it named and the credential it came with: the user that credential names
// (bearerUser) and its SHA-256 (hex), never the credential itself.
function recordServed(method, target, extra) {
  const header = authorizationOf(extra);
  stats.served.push({
    method, target, user: bearerUser(header),
    auth_sha256: header ? createHash('sha256').update(header).digest('hex') : null,
  });
  writeStats();
}

// --cursor-bytes pads every cursor to at least that many characters.
const encodeCursor = (kind, offset) => {
  const c = { k: kind, o: offset };
  if (opts.cursorBytes > 0) c.p = 'x'.repeat(Math.ceil((opts.cursorBytes * 3) / 4));
  return Buffer.from(JSON.stringify(c)).toString('base64url');
};

function decodeCursor(kind, cursor) {
  if (cursor === undefined) return 0;
  try {
    const c = JSON.parse(Buffer.from(String(cursor), 'base64url').toString('utf8'));
    if (c.k === kind && Number.isInteger(c.o) && c.o >= 0) return c.o;
  } catch {
    // fall through
  }
  throw new McpError(ErrorCode.InvalidParams, `invalid cursor for ${kind}`);
}

async function listPage(kind, request, extra, places = opts.echoOn) {
  if (opts.hang) return new Promise(() => {});
  if (opts.delayMs > 0) await sleep(opts.delayMs);
  let items = state[kind];
  if (kind === 'tools') {
    const prefix = principalPrefix(extra);
    items = items.map((t) => ({ ...t, name: prefix + t.name }));
  }
  if (kind === 'tools' && places.includes('listing')) {
    const quote = echoText(credentialsSent(extra));
    items = items.map((t) => ({ ...t, title: quote, description: `${t.description}: ${quote}` }));
  }
  const offset = decodeCursor(kind, request.params?.cursor);
  const size = opts.pageSize > 0 ? opts.pageSize : Math.max(items.length, 1);
  const page = items.slice(offset, offset + size);
  if (kind === 'tools' && opts.oversizeBytes > 0 && page.length > 0) {
    const each = Math.ceil(opts.oversizeBytes / page.length);
    for (let i = 0; i < page.length; ++i) {
      page[i] = { ...page[i], description: `${page[i].description} ${'x'.repeat(each)}` };
    }
  }
  const result = { [kind]: page };
  if (opts.cursorCycle > 0) {
    // Pages 1 .. K, then back to page 1: a pagination loop of length K.
    const index = Math.floor(offset / size);
    result.nextCursor = encodeCursor(kind, ((index % opts.cursorCycle) + 1) * size);
  } else if (offset + size < items.length) {
    result.nextCursor = encodeCursor(kind, offset + size);
  } else if (opts.emptyLastCursor) {
    result.nextCursor = '';
  }
  if (opts.ttlMs !== undefined) result.ttlMs = opts.ttlMs;
  if (opts.cacheScope !== undefined) result.cacheScope = opts.cacheScope;
  return result;
}

// HTTP: `req` and `url` are the request that opened the session (what echo quotes and where).
function makeServer(req, url) {
  const capabilities = { tools: { listChanged: true } };
  if (!opts.noResources) capabilities.resources = { listChanged: true };
  if (!opts.noPrompts) capabilities.prompts = { listChanged: true };
  if (opts.completions) capabilities.completions = {};
  const places = echoPlaces(url);
  const echo = places.includes('listing');
  const quote = echo ? echoText(credentialsSent({ requestInfo: { headers: req?.headers } })) : '';
  const server = new Server(
    { name: 'quiver-test-upstream', version: echo ? `1.0.0 ${quote}` : '1.0.0' },
    echo ? { capabilities, instructions: quote } : { capabilities },
  );
  server.setRequestHandler(types.ListToolsRequestSchema, (r, x) => listPage('tools', r, x, places));
  server.setRequestHandler(types.CallToolRequestSchema, async (r, x) => {
    stats.called.push(r.params.name);
    recordServed('tools/call', r.params.name, x);
    countCall('tools/call');
    const prefix = principalPrefix(x);
    if (!state.tools.some((t) => prefix + t.name === r.params.name)) {
      throw new McpError(ErrorCode.InvalidParams, `unknown tool: ${r.params.name}`);
    }
    // Arguments for the relay's tests: sleep_ms (answers after that long, unless the client
    // cancels: notifications/cancelled aborts the request and is counted as `cancelled`), bytes
    // (a text of that many bytes).
    const args = r.params.arguments ?? {};
    if (Number.isInteger(args.sleep_ms) && args.sleep_ms > 0) {
      const aborted = await new Promise((resolve) => {
        const timer = setTimeout(() => resolve(false), args.sleep_ms);
        x?.signal?.addEventListener('abort', () => {
          clearTimeout(timer);
          resolve(true);
        });
      });
      if (aborted) {
        countCall('cancelled');
        return { content: [] };
      }
    }
    if (Number.isInteger(args.bytes) && args.bytes > 0) {
      return { content: [{ type: 'text', text: 'x'.repeat(args.bytes) }] };
    }
    return { content: [{ type: 'text', text: `called ${r.params.name}` }] };
  });
  if (!opts.noResources) {
    server.setRequestHandler(types.ListResourcesRequestSchema, (r, x) => listPage('resources', r, x));
    server.setRequestHandler(types.ListResourceTemplatesRequestSchema, (r, x) =>
      listPage('resourceTemplates', r, x),
    );
    server.setRequestHandler(types.ReadResourceRequestSchema, async (r, x) => {
      recordServed('resources/read', r.params.uri, x);
      return {
        contents: [{ uri: r.params.uri, mimeType: 'text/plain', text: `content of ${r.params.uri}` }],
      };
    });
  }
  if (!opts.noPrompts) {
    server.setRequestHandler(types.ListPromptsRequestSchema, (r, x) => listPage('prompts', r, x));
    server.setRequestHandler(types.GetPromptRequestSchema, async (r, x) => {
      recordServed('prompts/get', r.params.name, x);
      return {
        messages: [{ role: 'user', content: { type: 'text', text: `prompt ${r.params.name}` } }],
      };
    });
  }
  if (opts.completions) {
    // --completions: one value, the argument's value with `-completed` after it.
    server.setRequestHandler(types.CompleteRequestSchema, async (r, x) => {
      recordServed('completion/complete', r.params.ref?.name ?? r.params.ref?.uri, x);
      return { completion: { values: [`${r.params.argument?.value ?? ''}-completed`] } };
    });
  }
  // list_changed goes only to clients that finished the handshake (notifications/initialized).
  server.oninitialized = () => servers.add(server);
  server.onclose = () => servers.delete(server);
  return server;
}

// Every request passes here before the Server sees it: counted, and failed on demand.
// `onListRequest(id, method)` lets the stdio output shaper recognise the reply.
// `places`: where to echo credentials (echoPlaces of the session's URL).
function interceptRequests(transport, onListRequest, places = opts.echoOn) {
  const inner = transport.onmessage;
  transport.onmessage = (message, extra) => {
    if (message && typeof message.method === 'string' && message.id !== undefined) {
      countCall(message.method);
      if (places.includes(message.method)) {
        transport
          .send({
            jsonrpc: '2.0',
            id: message.id,
            error: { code: -32001, message: echoText(credentialsSent(extra)) },
          })
          .catch(() => {});
        return;
      }
      if (opts.failMethod === message.method) {
        transport
          .send({
            jsonrpc: '2.0',
            id: message.id,
            error: { code: opts.failCode, message: `injected failure on ${message.method}` },
          })
          .catch(() => {});
        return;
      }
      if (onListRequest && LIST_METHODS.has(message.method)) onListRequest(message.id, message.method);
    }
    inner?.(message, extra);
  };
}

function notifyChanged(kind) {
  for (const server of servers) {
    const send =
      kind === 'tools'
        ? server.sendToolListChanged()
        : kind === 'prompts'
          ? server.sendPromptListChanged()
          : server.sendResourceListChanged();
    Promise.resolve(send).catch(() => {});
  }
}

// A reply that is not JSON: it starts like the real one, then breaks off.
const garbage = (id) => `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"tools":[{"name":garbage!!`;

// Valid JSON nested `depth` levels deep, as text: JSON.stringify itself recurses per level.
const deepValue = (depth) => '['.repeat(depth) + ']'.repeat(depth);
// --deep-reply: a tools/list result whose one tool's inputSchema holds a value `depth` deep.
const deepReply = (id, depth) =>
  `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"tools":[{"name":"deep",` +
  `"inputSchema":{"type":"object","default":${deepValue(depth)}}}]}}`;
// --deep-notify: a notification whose params hold a value `depth` deep.
const deepNotification = (depth) =>
  `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":${deepValue(depth)}}}`;

// ---- control commands (stdio: --control FILE; HTTP: POST /control) ----

const SETTABLE = {
  delay_ms: 'delayMs',
  hang: 'hang',
  fail_method: 'failMethod',
  fail_code: 'failCode',
  garble: 'garble',
  oversize_bytes: 'oversizeBytes',
  slow_drip: 'slowDrip',
  page_size: 'pageSize',
  ttl_ms: 'ttlMs',
  cache_scope: 'cacheScope',
  session_ttl_ms: 'sessionTtlMs',
  deep_reply: 'deepReply',
  deep_notify: 'deepNotify',
  cursor_bytes: 'cursorBytes',
  cursor_cycle: 'cursorCycle',
  empty_last_cursor: 'emptyLastCursor',
};

function applyControl(cmd) {
  if (cmd === null || typeof cmd !== 'object' || Array.isArray(cmd)) {
    throw new Error('a control command is a JSON object');
  }
  stats.control += 1;
  const changed = new Set();
  const name = (v, what) => {
    if (typeof v !== 'string' || v === '') throw new Error(`${what} needs a non-empty string`);
    return v;
  };
  if ('add_tool' in cmd) {
    const n = name(cmd.add_tool, 'add_tool');
    state.tools = state.tools.filter((t) => t.name !== n);
    state.tools.push(makeTool(n, cmd.description));
    changed.add('tools');
  }
  if ('update_tool' in cmd) {
    const n = name(cmd.update_tool, 'update_tool');
    const t = state.tools.find((x) => x.name === n);
    if (!t) throw new Error(`no tool ${n}`);
    t.description = cmd.description ?? `${t.description} (updated)`;
    changed.add('tools');
  }
  if ('remove_tool' in cmd) {
    const n = name(cmd.remove_tool, 'remove_tool');
    state.tools = state.tools.filter((t) => t.name !== n);
    changed.add('tools');
  }
  if ('add_resource' in cmd) {
    const uri = name(cmd.add_resource, 'add_resource');
    state.resources = state.resources.filter((r) => r.uri !== uri);
    state.resources.push({ uri, name: cmd.name ?? uri, mimeType: 'text/plain' });
    changed.add('resources');
  }
  if ('remove_resource' in cmd) {
    const uri = name(cmd.remove_resource, 'remove_resource');
    state.resources = state.resources.filter((r) => r.uri !== uri);
    changed.add('resources');
  }
  if ('add_prompt' in cmd) {
    const n = name(cmd.add_prompt, 'add_prompt');
    state.prompts = state.prompts.filter((p) => p.name !== n);
    state.prompts.push({ name: n, description: cmd.description ?? `Test prompt ${n}` });
    changed.add('prompts');
  }
  if ('remove_prompt' in cmd) {
    const n = name(cmd.remove_prompt, 'remove_prompt');
    state.prompts = state.prompts.filter((p) => p.name !== n);
    changed.add('prompts');
  }
  if ('set' in cmd) {
    if (typeof cmd.set !== 'object' || cmd.set === null) throw new Error('set needs an object');
    for (const [k, v] of Object.entries(cmd.set)) {
      if (!SETTABLE[k]) throw new Error(`cannot set ${k}`);
      opts[SETTABLE[k]] = v;
    }
  }
  if ('notify' in cmd) {
    const kinds = Array.isArray(cmd.notify) ? cmd.notify : [cmd.notify];
    for (const k of kinds) {
      if (!['tools', 'resources', 'prompts'].includes(k)) throw new Error(`cannot notify ${k}`);
      changed.add(k);
    }
  }
  if ('expire_sessions' in cmd) expireAllSessions();
  if ('drop_streams' in cmd) {
    // The GET streams break (a proxy or the network cut them): their sockets close mid-stream.
    // Before the notices of this command, so that a change in it falls in the gap.
    for (const res of getStreams) res.destroy();
    getStreams.clear();
  }
  for (const kind of changed) notifyChanged(kind);
  writeStats();
  log(`control ${JSON.stringify(cmd)}`);
  if ('exit' in cmd) setTimeout(() => process.exit(Number(cmd.exit) || 0), 10);
  return statsSnapshot();
}

// ---- lifetime ----

setTimeout(() => {
  log(`max lifetime ${opts.maxLifetimeMs} ms reached, exiting`);
  process.exit(0);
}, opts.maxLifetimeMs).unref();

// ---- stdio ----

async function runStdio() {
  if (opts.perAuth && !bearerUser(process.env.TEST_UPSTREAM_AUTHORIZATION)) {
    process.stderr.write('test-upstream: unauthorized (TEST_UPSTREAM_AUTHORIZATION)\n');
    process.exit(3);
  }
  // Which replies to shape: request id → method, for list requests in flight.
  const pending = new Map();
  let out = Promise.resolve();
  const writeRaw = (text) =>
    new Promise((resolve) => (process.stdout.write(text) ? resolve() : process.stdout.once('drain', resolve)));
  const drip = async (text) => {
    const bytes = Buffer.from(text);
    const step = Math.max(1, opts.dripBytes);
    for (let i = 0; i < bytes.length; i += step) {
      await writeRaw(bytes.subarray(i, i + step));
      await sleep(opts.dripIntervalMs);
    }
  };
  // A stand-in for process.stdout: the transport serialises, we decide how the bytes leave.
  // Output stays in order: one promise chain for every message.
  const shapedStdout = {
    write(text) {
      let method;
      try {
        const m = JSON.parse(text);
        if (m && m.id !== undefined && ('result' in m || 'error' in m)) {
          method = pending.get(m.id);
          pending.delete(m.id);
          if (method === 'tools/list' && opts.garble && 'result' in m) text = `${garbage(m.id)}\n`;
          if (method === 'tools/list' && opts.deepReply > 0 && 'result' in m) {
            text = `${deepReply(m.id, opts.deepReply)}\n`;
          }
          // The notification goes first: the listing must survive it and get its reply.
          if (LIST_METHODS.has(method) && opts.deepNotify > 0) {
            text = `${deepNotification(opts.deepNotify)}\n${text}`;
          }
        }
      } catch {
        // not ours to judge
      }
      const slow = opts.slowDrip && method !== undefined;
      out = out.then(() => (slow ? drip(text) : writeRaw(text))).catch(() => {});
      return true;
    },
    once() {},
    on() {},
    off() {},
  };
  const transport = new StdioServerTransport(process.stdin, shapedStdout);
  const server = makeServer();
  await server.connect(transport);
  interceptRequests(transport, (id, method) => pending.set(id, method));
  // The parent went away (or closed our stdin on purpose): nothing left to serve.
  process.stdin.on('end', () => {
    log('stdin closed, exiting');
    process.exit(0);
  });
  if (opts.control) watchControlFile(opts.control);
  writeStats();
  log(`stdio ready: ${state.tools.length} tools`);
}

function watchControlFile(file) {
  let done = 0; // complete lines already applied
  const poll = () => {
    let text;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch {
      return; // not there yet
    }
    const lines = text.split('\n');
    lines.pop(); // the part after the last newline is not complete yet
    for (; done < lines.length; ++done) {
      const line = lines[done].trim();
      if (!line) continue;
      try {
        applyControl(JSON.parse(line));
      } catch (e) {
        log(`control line ${done + 1} rejected: ${e.message}`);
      }
    }
  };
  fs.watchFile(file, { interval: 25, persistent: false }, poll);
  poll();
}

// ---- Streamable HTTP ----

const sessions = new Map(); // id → { transport, server, lastSeen }
const getStreams = new Set(); // the open GET (notification) streams, for drop_streams

function expireAllSessions() {
  for (const [id, s] of sessions) closeSession(id, s, true);
}

function closeSession(id, s, expired) {
  sessions.delete(id);
  stats.sessions.open = sessions.size;
  if (expired) stats.sessions.expired += 1;
  s.transport.close().catch(() => {});
  s.server.close().catch(() => {});
  servers.delete(s.server);
}

function sendJson(res, status, body, headers = {}) {
  if (res.headersSent) return;
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

const rpcError = (code, message) => ({ jsonrpc: '2.0', id: null, error: { code, message } });

function readBody(req, limit = 8 << 20) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > limit) {
        reject(new Error('body too large'));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

// Replaces res.write/res.end so that everything written leaves a few bytes at a time.
function dripResponse(res) {
  const write = res.write.bind(res);
  const end = res.end.bind(res);
  let chain = Promise.resolve();
  const step = () => Math.max(1, opts.dripBytes);
  res.write = (chunk, encoding, cb) => {
    if (typeof encoding === 'function') [cb, encoding] = [encoding, undefined];
    const bytes = Buffer.isBuffer(chunk) || chunk instanceof Uint8Array ? Buffer.from(chunk) : Buffer.from(String(chunk), encoding);
    chain = chain.then(async () => {
      for (let i = 0; i < bytes.length && !res.destroyed; i += step()) {
        write(bytes.subarray(i, i + step()));
        await sleep(opts.dripIntervalMs);
      }
    });
    if (cb) chain = chain.then(() => cb());
    return true;
  };
  res.end = (chunk, encoding, cb) => {
    if (typeof chunk === 'function') [cb, chunk] = [chunk, undefined];
    if (typeof encoding === 'function') [cb, encoding] = [encoding, undefined];
    if (chunk !== undefined && chunk !== null) res.write(chunk, encoding);
    chain = chain.then(() => end(cb));
    return res;
  };
}

// --deep-notify over HTTP: the first SSE event of a list request's stream is preceded by an event
// carrying a notification nested `depth` deep.
function prependDeepNotification(res, depth) {
  // The SDK's HTTP layer sets Content-Length for the body it knows: drop it, or the client would
  // read only that many bytes of the longer stream.
  const writeHead = res.writeHead.bind(res);
  const isLength = (k) => String(k).toLowerCase() === 'content-length';
  res.writeHead = (status, ...rest) => {
    res.removeHeader('content-length');
    const args = rest.map((h) => {
      if (Array.isArray(h)) {
        if (h.length > 0 && Array.isArray(h[0])) return h.filter(([k]) => !isLength(k));
        const flat = [];
        for (let i = 0; i + 1 < h.length; i += 2) if (!isLength(h[i])) flat.push(h[i], h[i + 1]);
        return flat;
      }
      if (h && typeof h === 'object') {
        return Object.fromEntries(Object.entries(h).filter(([k]) => !isLength(k)));
      }
      return h;
    });
    return writeHead(status, ...args);
  };
  const write = res.write.bind(res);
  let sent = false;
  res.write = (chunk, ...rest) => {
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    if (!sent && text.startsWith('event: message')) {
      sent = true;
      write(`event: message\ndata: ${deepNotification(depth)}\n\n`);
    }
    return write(chunk, ...rest);
  };
}

async function handleMcp(req, res, url) {
  if (opts.perAuth && !bearerUser(req.headers.authorization)) {
    return sendJson(res, 401, rpcError(-32001, 'unauthorized'), {
      'WWW-Authenticate': 'Bearer realm="quiver-test-upstream"',
    });
  }
  let body;
  if (req.method === 'POST') {
    let text;
    try {
      text = await readBody(req);
      body = JSON.parse(text);
    } catch (e) {
      return sendJson(res, 400, rpcError(-32700, `parse error: ${e.message}`));
    }
  }
  const messages = body === undefined ? [] : Array.isArray(body) ? body : [body];
  const listRequest = messages.find((m) => m && LIST_METHODS.has(m.method) && m.id !== undefined);

  if (opts.garble && listRequest?.method === 'tools/list') {
    countCall('tools/list');
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end(garbage(listRequest.id));
  }
  if (opts.deepReply > 0 && listRequest?.method === 'tools/list') {
    countCall('tools/list');
    const text = deepReply(listRequest.id, opts.deepReply);
    if (opts.jsonResponse) {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      return res.end(text);
    }
    res.writeHead(200, { 'Content-Type': 'text/event-stream' });
    return res.end(`event: message\ndata: ${text}\n\n`);
  }
  if (opts.slowDrip && listRequest) dripResponse(res);
  if (opts.deepNotify > 0 && listRequest && !opts.jsonResponse) {
    prependDeepNotification(res, opts.deepNotify);
  }

  if (opts.stateless) {
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: opts.jsonResponse,
    });
    const server = makeServer(req, url);
    await server.connect(transport);
    interceptRequests(transport, undefined, echoPlaces(url));
    res.on('close', () => {
      transport.close().catch(() => {});
      server.close().catch(() => {});
      servers.delete(server);
    });
    return transport.handleRequest(req, res, body);
  }

  const sid = req.headers['mcp-session-id'];
  if (sid !== undefined) {
    const s = sessions.get(sid);
    if (!s) return sendJson(res, 404, rpcError(-32001, 'Session not found'));
    if (opts.sessionTtlMs > 0 && Date.now() - s.lastSeen > opts.sessionTtlMs) {
      closeSession(sid, s, true);
      log(`session ${sid} expired`);
      return sendJson(res, 404, rpcError(-32001, 'Session expired'));
    }
    s.lastSeen = Date.now();
    if (req.method === 'GET') {
      getStreams.add(res);
      res.on('close', () => getStreams.delete(res));
      res.on('error', () => {});  // a write after drop_streams cut the socket
    }
    return s.transport.handleRequest(req, res, body);
  }
  const initialize = messages.some((m) => m && m.method === 'initialize');
  if (req.method !== 'POST' || !initialize) {
    return sendJson(res, 400, rpcError(-32000, 'Bad Request: no session id (initialize first)'));
  }
  const server = makeServer(req, url);
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    enableJsonResponse: opts.jsonResponse,
    onsessioninitialized: (id) => {
      sessions.set(id, { transport, server, lastSeen: Date.now() });
      stats.sessions.created += 1;
      stats.sessions.open = sessions.size;
    },
  });
  transport.onclose = () => {
    const id = transport.sessionId;
    if (id && sessions.get(id)?.transport === transport) {
      sessions.delete(id);
      stats.sessions.open = sessions.size;
    }
    servers.delete(server);
  };
  await server.connect(transport);
  interceptRequests(transport, undefined, echoPlaces(url));
  return transport.handleRequest(req, res, body);
}

async function handleControl(req, res, url) {
  if (req.method === 'GET' && url.pathname === '/control/stats') return sendJson(res, 200, statsSnapshot());
  if (req.method === 'POST' && url.pathname === '/control') {
    let cmd;
    try {
      cmd = JSON.parse(await readBody(req, 1 << 20));
    } catch (e) {
      return sendJson(res, 400, { error: `not JSON: ${e.message}` });
    }
    try {
      return sendJson(res, 200, applyControl(cmd));
    } catch (e) {
      return sendJson(res, 400, { error: e.message });
    }
  }
  return sendJson(res, 404, { error: 'not found' });
}

async function runHttp() {
  const httpServer = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://127.0.0.1');
    const route = url.pathname === '/mcp' ? handleMcp : url.pathname.startsWith('/control') ? handleControl : null;
    if (!route) return sendJson(res, 404, { error: 'not found' });
    route(req, res, url).catch((e) => {
      log(`error on ${req.method} ${url.pathname}: ${e.stack ?? e}`);
      sendJson(res, 500, rpcError(-32603, 'internal error'));
    });
  });
  if (opts.sessionTtlMs > 0) {
    setInterval(() => {
      const now = Date.now();
      for (const [id, s] of sessions) {
        if (opts.sessionTtlMs > 0 && now - s.lastSeen > opts.sessionTtlMs) closeSession(id, s, true);
      }
    }, Math.max(20, Math.floor(opts.sessionTtlMs / 2))).unref();
  }
  await new Promise((resolve, reject) => {
    httpServer.once('error', reject);
    httpServer.listen(opts.port, '127.0.0.1', resolve);
  });
  const port = httpServer.address().port;
  const base = `http://127.0.0.1:${port}`;
  process.stdout.write(
    JSON.stringify({ url: `${base}/mcp`, control: `${base}/control`, port, pid: process.pid }) + '\n',
  );
  // The parent died: we were re-parented. Stop rather than linger.
  setInterval(() => {
    if (process.ppid !== parentAtStart) {
      log('parent gone, exiting');
      process.exit(0);
    }
  }, 200).unref();
  if (opts.control) watchControlFile(opts.control);
  writeStats();
  log(`http ready on ${base}/mcp`);
}

if (opts.transport === 'stdio') await runStdio();
else await runHttp();
