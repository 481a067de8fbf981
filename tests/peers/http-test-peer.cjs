// A small HTTP peer for the Streamable HTTP transport tests: the misbehaviours real MCP servers
// do not show on demand. Plain node:http, no dependencies. Listens on 127.0.0.1 on an ephemeral
// port and prints {"port":N} as its first stdout line. Behaviour is chosen by path:
//
//   /mcp            a tiny well-behaved MCP endpoint: initialize (JSON, Mcp-Session-Id
//                   "peer-session-1"), 202 for notifications, any other request is answered with
//                   what the peer saw (session id, protocol version, whether the expected secrets
//                   from PEER_EXPECT_AUTH / PEER_EXPECT_KEY arrived: booleans, never the values);
//                   unknown session -> 404. GET: the first stream sends `retry: 100` and one
//                   event (id g1, tools/list_changed), then ends; a reconnection with
//                   Last-Event-ID gets event g2 (resources/list_changed, echoing the id it was
//                   given) and stays open. DELETE is recorded (see /stats).
//   /stats          GET: what /mcp recorded ({deletes: [...], gets: [...]}).
//   /no-get         initialize as /mcp; GET and DELETE -> 405.
//   /hang           never answers.
//   /drip           200 text/event-stream, then a comment line every 100 ms, never an event.
//   /drip-headers   the status line, then one header byte every 100 ms.
//   /big-json?bytes=N, /big-sse?bytes=N   a response whose result pads to N bytes.
//   /garbage-json, /garbage-sse, /not-jsonrpc, /html   replies that are not JSON-RPC over MCP.
//   /status/NNN     status NNN with a JSON body that echoes every request header (so tests can
//                   check that secrets a server echoes are scrubbed from error messages).
//   /notify-then-hang  SSE: priming event, a notification, the response, then stays open.
//   /resume         SEP-1699: the POST stream sends only a priming event (id r0, retry 50) and
//                   ends; GET with Last-Event-ID r0 delivers the response (id r1).
//   /batch          a JSON array of responses, one per request of a batch.
//   /ack-text       202 with a text/plain "Accepted" body (as express's sendStatus does).
'use strict';
const http = require('http');

const state = { deletes: [], gets: [], lastRequestId: null };
const hung = new Set();  // sockets kept open on purpose

function readBody(req, done) {
  const chunks = [];
  let size = 0;
  req.on('data', (c) => {
    size += c.length;
    if (size <= 1 << 20) chunks.push(c);
  });
  req.on('end', () => {
    let msg = null;
    try {
      msg = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch (e) {
      msg = null;
    }
    done(msg);
  });
}

function json(res, status, body, headers = {}) {
  const text = JSON.stringify(body);
  res.writeHead(status, Object.assign({ 'Content-Type': 'application/json' }, headers));
  res.end(text);
}

function sse(res) {
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
}

function initializeResult(id) {
  return {
    jsonrpc: '2.0',
    id,
    result: {
      protocolVersion: '2025-11-25',
      capabilities: { tools: { listChanged: true } },
      serverInfo: { name: 'http-test-peer', version: '1.0.0' },
    },
  };
}

function hang(req, res) {
  hung.add(res.socket);
  res.socket.on('close', () => hung.delete(res.socket));
}

function padded(id, bytes) {
  return JSON.stringify({ jsonrpc: '2.0', id, result: { pad: 'a'.repeat(Math.max(0, bytes)) } });
}

function mcp(req, res, url) {
  const session = req.headers['mcp-session-id'];
  if (req.method === 'POST') {
    readBody(req, (msg) => {
      if (msg && msg.method === 'initialize') {
        json(res, 200, initializeResult(msg.id), { 'Mcp-Session-Id': 'peer-session-1' });
        return;
      }
      if (session !== 'peer-session-1') {
        json(res, 404, { jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } });
        return;
      }
      if (!msg || msg.id === undefined) {
        res.writeHead(202).end();
        return;
      }
      json(res, 200, {
        jsonrpc: '2.0',
        id: msg.id,
        result: {
          sessionId: session,
          protocolVersion: req.headers['mcp-protocol-version'] || null,
          authorization: req.headers['authorization'] === process.env.PEER_EXPECT_AUTH,
          apiKey: req.headers['x-api-key'] === process.env.PEER_EXPECT_KEY,
          userAgent: req.headers['user-agent'] || null,
          accept: req.headers['accept'] || null,
          contentType: req.headers['content-type'] || null,
        },
      });
    });
    return;
  }
  if (req.method === 'GET') {
    if (session !== 'peer-session-1') {
      json(res, 404, { error: 'Session not found' });
      return;
    }
    const lastEventId = req.headers['last-event-id'] || null;
    state.gets.push({ lastEventId, protocolVersion: req.headers['mcp-protocol-version'] || null });
    sse(res);
    if (!lastEventId) {
      res.write('retry: 100\nid: g1\nevent: message\ndata: ' +
                JSON.stringify({ jsonrpc: '2.0', method: 'notifications/tools/list_changed' }) + '\n\n');
      res.end();
    } else {
      res.write('id: g2\ndata: ' + JSON.stringify({
        jsonrpc: '2.0', method: 'notifications/resources/list_changed', params: { lastEventId },
      }) + '\n\n');
      hang(req, res);
    }
    return;
  }
  if (req.method === 'DELETE') {
    state.deletes.push({ session: session || null });
    res.writeHead(200).end();
    return;
  }
  res.writeHead(405).end();
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://127.0.0.1');
  const path = url.pathname;
  const bytes = Number(url.searchParams.get('bytes') || '0');
  if (path === '/mcp') return mcp(req, res, url);
  if (path === '/stats') return json(res, 200, state);
  if (path === '/hang') return hang(req, res);
  if (path === '/drip-headers') {
    const socket = req.socket;
    socket.write('HTTP/1.1 200 OK\r\nX-Slow: ');
    const timer = setInterval(() => socket.write('a'), 100);
    socket.on('close', () => clearInterval(timer));
    socket.on('error', () => clearInterval(timer));
    return;
  }
  if (path === '/drip') {
    sse(res);
    const timer = setInterval(() => res.write(': tick\n'), 100);
    res.socket.on('close', () => clearInterval(timer));
    return;
  }
  if (path.startsWith('/status/')) {
    return readBody(req, () => json(res, Number(path.slice(8)), { error: 'nope', headers: req.headers }));
  }
  if (req.method === 'GET' && path === '/resume') {
    const lastEventId = req.headers['last-event-id'];
    if (lastEventId !== 'r0') return json(res, 400, { error: 'expected Last-Event-ID r0' });
    sse(res);
    res.end('id: r1\ndata: ' + JSON.stringify({
      jsonrpc: '2.0', id: state.lastRequestId, result: { resumedFrom: lastEventId },
    }) + '\n\n');
    return;
  }
  if (req.method === 'GET' || req.method === 'DELETE') return res.writeHead(405).end();

  readBody(req, (msg) => {
    const id = msg && !Array.isArray(msg) ? msg.id : null;
    switch (path) {
      case '/no-get':
        if (msg && msg.method === 'initialize') {
          return json(res, 200, initializeResult(msg.id), { 'Mcp-Session-Id': 'no-get-session' });
        }
        if (!msg || msg.id === undefined) return res.writeHead(202).end();
        return json(res, 200, { jsonrpc: '2.0', id, result: {} });
      case '/big-json':
        res.writeHead(200, { 'Content-Type': 'application/json' });
        return res.end(padded(id, bytes));
      case '/big-sse':
        sse(res);
        return res.end('data: ' + padded(id, bytes) + '\n\n');
      case '/garbage-json':
        res.writeHead(200, { 'Content-Type': 'application/json' });
        return res.end('<html>this is not json</html>');
      case '/garbage-sse':
        sse(res);
        return res.end('id: 1\ndata: {"jsonrpc": "2.0", "id": ' + JSON.stringify(id) + ', oops\n\n');
      case '/ack-text':
        res.writeHead(202, { 'Content-Type': 'text/plain' });
        return res.end('Accepted');
      case '/not-jsonrpc':
        return json(res, 200, { hello: 'world' });
      case '/html':
        res.writeHead(200, { 'Content-Type': 'text/html' });
        return res.end('<html><body>login here</body></html>');
      case '/notify-then-hang':
        sse(res);
        res.write('id: n0\ndata:\n\n');
        res.write('id: n1\ndata: ' + JSON.stringify({
          jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'working' },
        }) + '\n\n');
        res.write('id: n2\ndata: ' + JSON.stringify({ jsonrpc: '2.0', id, result: { ok: true } }) + '\n\n');
        return hang(req, res);
      case '/resume':
        state.lastRequestId = id;
        sse(res);
        return res.end('id: r0\nretry: 50\ndata:\n\n');
      case '/batch': {
        const list = Array.isArray(msg) ? msg : [];
        const answers = list.filter((m) => m && m.id !== undefined)
                            .map((m) => ({ jsonrpc: '2.0', id: m.id, result: { method: m.method } }));
        return json(res, 200, answers);
      }
      default:
        return json(res, 404, { error: 'no such path' });
    }
  });
});

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + '\n');
});
process.on('SIGTERM', () => process.exit(0));
