// DBOS Transact doing what one ledgerd tool call does: one durable workflow
// holding one step whose result (~200 bytes of JSON) stands for a tool's side
// effect. Keeps exactly --concurrency workflows in flight for --seconds and
// prints one line of JSON on stdout. See README.md beside this file.
//
//   node dbos_bench.mjs --database-url URL --seconds S --concurrency C [--warmup S] [--pool-size N]

import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';

// Only our result line may reach stdout: DBOS and its migration runner log
// through console.log/console.info, so send those to stderr.
console.log = console.error;
console.info = console.error;
console.debug = () => {};

function die(msg) {
  process.stderr.write(`dbos_bench: ${msg}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { warmup: 2 };
  const names = { '--database-url': 'url', '--seconds': 'seconds', '--concurrency': 'concurrency',
                  '--warmup': 'warmup', '--pool-size': 'poolSize' };
  for (let i = 0; i < argv.length; i++) {
    let [flag, value] = argv[i].split(/=(.*)/s, 2);
    const key = names[flag];
    if (!key) die(`unknown argument ${argv[i]}`);
    if (value === undefined) {
      if (i + 1 >= argv.length) die(`${flag} needs a value`);
      value = argv[++i];
    }
    opts[key] = value;
  }
  if (!opts.url) die('--database-url is required');
  for (const k of ['seconds', 'concurrency']) if (opts[k] === undefined) die(`--${k} is required`);
  const num = (k, min, int) => {
    const v = Number(opts[k]);
    if (!Number.isFinite(v) || v < min || (int && !Number.isInteger(v))) die(`bad value for ${k}: ${opts[k]}`);
    opts[k] = v;
  };
  num('seconds', Number.MIN_VALUE, false);
  num('concurrency', 1, true);
  num('warmup', 0, false);
  if (opts.poolSize !== undefined) num('poolSize', 1, true);
  return opts;
}

// The caller speaks libpq: postgresql://user@/dbname?host=/socket/dir&port=NNNN.
// DBOS checks its URL with WHATWG `new URL` and demands a user and a host name,
// and an empty host (`user@/db`) is not a valid WHATWG URL. node-postgres, which
// DBOS connects with, takes `host` and `port` from the query string over the
// authority, so a placeholder host there changes nothing about where it
// connects: the socket directory in ?host= is what it uses.
function dbosDatabaseUrl(raw) {
  const m = /^(postgres(?:ql)?:\/\/)([^/?#]*)(.*)$/s.exec(raw);
  if (!m) throw new Error('--database-url must start with postgresql:// or postgres://');
  let [, scheme, authority, rest] = m;
  const at = authority.lastIndexOf('@');
  let userinfo = at >= 0 ? authority.slice(0, at) : '';
  let hostport = at >= 0 ? authority.slice(at + 1) : authority;
  const u = new URL(`${scheme}placeholder${rest}`);
  if (!u.pathname || u.pathname === '/') throw new Error('--database-url names no database');
  if (hostport === '' || hostport.startsWith(':')) {
    if (!u.searchParams.get('host')) {
      throw new Error('--database-url has no host: give the socket directory as ?host=/dir');
    }
    const port = hostport.slice(1);
    if (port && !u.searchParams.get('port')) u.searchParams.set('port', port);
    hostport = 'localhost';
  }
  if (userinfo === '' && !u.searchParams.get('user')) {
    userinfo = encodeURIComponent(os.userInfo().username); // libpq's default user
  }
  const out = `${scheme}${userinfo ? `${userinfo}@` : ''}${hostport}${u.pathname}${u.search}`;
  new URL(out); // fail here, not deep inside DBOS
  return out;
}

function sdkVersion() {
  const require = createRequire(import.meta.url);
  let dir = path.dirname(require.resolve('@dbos-inc/dbos-sdk'));
  for (;;) {
    const f = path.join(dir, 'package.json');
    if (fs.existsSync(f)) {
      const pkg = JSON.parse(fs.readFileSync(f, 'utf8'));
      if (pkg.name === '@dbos-inc/dbos-sdk') return pkg.version;
    }
    const up = path.dirname(dir);
    if (up === dir) throw new Error('cannot find @dbos-inc/dbos-sdk/package.json');
    dir = up;
  }
}

const stderrLogger = {
  info: (e) => process.stderr.write(`dbos: ${e}\n`),
  debug: () => {},
  warn: (e) => process.stderr.write(`dbos warn: ${e}\n`),
  error: (e) => process.stderr.write(`dbos error: ${e instanceof Error ? e.stack : e}\n`),
};

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length)); // nearest rank
  return sorted[rank - 1];
}

const round = (x, d) => (x === null ? null : Number(x.toFixed(d)));

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const version = sdkVersion();
  const { DBOS } = await import('@dbos-inc/dbos-sdk');

  const config = {
    name: 'ledgerd-bench-dbos',
    systemDatabaseUrl: dbosDatabaseUrl(opts.url),
    logger: stderrLogger,
  };
  if (opts.poolSize !== undefined) config.systemDatabasePoolSize = opts.poolSize;
  DBOS.setConfig(config);

  // The step: a tool's side effect, whose ~200-byte JSON result DBOS records.
  const toolResult = (callID, args) => ({
    tool_call_id: callID,
    tool: 'http.get',
    ok: true,
    status: 200,
    url: args.url,
    body: 'x'.repeat(48),
  });
  const callTool = DBOS.registerStep(async (callID, args) => toolResult(callID, args), { name: 'callTool' });

  // The workflow: one tool call.
  const toolCall = DBOS.registerWorkflow(async (callID, args) => await callTool(callID, args),
    { name: 'toolCall' });

  const sampleID = `${randomUUID()}-run-1234`;
  const sample = JSON.stringify(toolResult(sampleID, { url: 'https://example.invalid/1234' }));
  process.stderr.write(`dbos_bench: step result is ${Buffer.byteLength(sample)} bytes of JSON\n`);

  await DBOS.launch(); // creates the system database's schema if it is not there
  let launched = true;
  try {
    const runID = randomUUID();
    let seq = 0;
    let failure = null;

    // Keep exactly `concurrency` workflows in flight until `seconds` have
    // passed; each one gets a fresh ID so nothing is deduplicated.
    async function phase(name, seconds, latencies) {
      const deadline = performance.now() + seconds * 1000;
      let completed = 0;
      const worker = async () => {
        while (failure === null && performance.now() < deadline) {
          const id = `${runID}-${name}-${seq++}`;
          const t0 = performance.now();
          const res = await DBOS.startWorkflow(toolCall, { workflowID: id })(id, { url: `https://example.invalid/${seq}` })
            .then((h) => h.getResult());
          const t1 = performance.now();
          if (!res || res.tool_call_id !== id) throw new Error(`workflow ${id} returned ${JSON.stringify(res)}`);
          latencies?.push(t1 - t0);
          completed++;
        }
      };
      const t0 = performance.now();
      await Promise.all(Array.from({ length: opts.concurrency }, () => worker().catch((e) => { failure ??= e; })));
      if (failure) throw failure;
      return { completed, elapsed: (performance.now() - t0) / 1000 };
    }

    if (opts.warmup > 0) await phase('warmup', opts.warmup, null);
    const latencies = [];
    const { completed, elapsed } = await phase('run', opts.seconds, latencies);
    latencies.sort((a, b) => a - b);

    const result = {
      per_s: round(completed / elapsed, 1),
      p50_ms: round(percentile(latencies, 50), 3),
      p99_ms: round(percentile(latencies, 99), 3),
      completed,
      version,
    };
    launched = false;
    await DBOS.shutdown();
    fs.writeSync(1, JSON.stringify(result) + '\n');
  } finally {
    if (launched) await DBOS.shutdown().catch(() => {});
  }
}

main().then(() => {
  // Should DBOS leave a handle open after shutdown, do not hang the caller.
  setTimeout(() => {
    process.stderr.write('dbos_bench: still running 5 s after DBOS.shutdown(); exiting\n');
    process.exit(0);
  }, 5000).unref();
}, (e) => {
  process.stderr.write(`dbos_bench: ${e instanceof Error ? e.stack : e}\n`);
  process.exit(1);
});
