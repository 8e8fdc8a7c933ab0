// Portkey's gateway (@portkey-ai/gateway, pinned in package.json) on
// 127.0.0.1 only, for the tests of tests/programs/ledger-gateway.
//
// Usage: node serve.mjs PORT
//
// Portkey's build/start-server.js exports no app: it builds one and calls
// @hono/node-server's serve({fetch, port}) itself, with no hostname, so node
// listens on every interface, and it has no option or variable for the
// address. The tests must stay on loopback, so this wrapper gives the first
// listen() of the process (that serve() call) the address 127.0.0.1, then
// loads Portkey's server as its own command would, headless (no UI routes).

import net from "node:net";

const port = Number.parseInt(process.argv[2] ?? "", 10);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error("usage: node serve.mjs PORT");
  process.exit(2);
}

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  net.Server.prototype.listen = listen; // only the first call: Portkey's serve()
  if (typeof args[0] !== "number" || args[1] !== undefined) {
    throw new Error("serve.mjs: Portkey's server no longer calls listen(port, undefined, cb)");
  }
  args[1] = "127.0.0.1";
  return listen.apply(this, args);
};

// start-server.js reads its flags from process.argv.
process.argv = [process.argv[0], process.argv[1], `--port=${port}`, "--headless"];
await import("@portkey-ai/gateway/build/start-server.js");
