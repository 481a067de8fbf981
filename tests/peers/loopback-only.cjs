// Preload (`node -r .../loopback-only.cjs server.js`) that keeps a test peer off the network:
// every TCP listen() is forced onto 127.0.0.1, whatever host the server asked for. Servers such as
// @modelcontextprotocol/server-everything listen on all interfaces and offer no option to bind
// loopback. Unix socket paths and handles passed to listen() are left alone.
'use strict';
const net = require('net');

const originalListen = net.Server.prototype.listen;

net.Server.prototype.listen = function listenOnLoopback(...args) {
  const first = args[0];
  if (first !== null && typeof first === 'object' && !Array.isArray(first)) {
    // listen(options[, callback]): TCP when it names a port (a path or handle is not TCP).
    if (first.path === undefined && first.handle === undefined && first._handle === undefined &&
        first.fd === undefined) {
      args[0] = Object.assign({}, first, { host: '127.0.0.1', ipv6Only: false });
    }
    return originalListen.apply(this, args);
  }
  if (typeof first === 'number' || (typeof first === 'string' && /^\d+$/.test(first))) {
    // listen(port[, host][, backlog][, callback]): keep the port, backlog and callback.
    const callback = typeof args[args.length - 1] === 'function' ? args.pop() : undefined;
    let backlog;
    if (args.length >= 3 && typeof args[2] === 'number') backlog = args[2];
    else if (args.length === 2 && typeof args[1] === 'number') backlog = args[1];
    const options = { port: Number(first), host: '127.0.0.1' };
    if (backlog !== undefined) options.backlog = backlog;
    return callback ? originalListen.call(this, options, callback)
                    : originalListen.call(this, options);
  }
  if (first === undefined || typeof first === 'function') {
    // listen() or listen(callback): an ephemeral port.
    const options = { port: 0, host: '127.0.0.1' };
    return typeof first === 'function' ? originalListen.call(this, options, first)
                                       : originalListen.call(this, options);
  }
  return originalListen.apply(this, args);  // a pipe path or a handle
};
