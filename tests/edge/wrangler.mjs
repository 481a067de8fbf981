// quiver-edge under wrangler, the tool a Cloudflare deployment uses, instead of a hand-written
// workerd config: `wrangler deploy --dry-run` bundles the staged worker with the committed
// deploy/wrangler.toml, and `wrangler dev --local` serves it (miniflare's workerd) against the
// tests' Redis, so that the edge end-to-end checks (run.mjs --runtime wrangler) run against what
// wrangler builds from that file.
//
// Wrangler 4 needs Node.js 22: the `node` package of tests/package.json (build/node). Its files
// stay in temp directories: a copy of the staged worker with its `.dev.vars` (the secrets, as
// `wrangler secret put` would hold them; mode 0600), and wrangler's own config and state. It
// never reaches the network: metrics off, and no fetch of the `Request.cf` object.
import { execFile } from 'node:child_process';
import {
  copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { ServedProcess, freePort, repoRoot } from './harness.mjs';

const nodeModules = path.join(repoRoot, 'build', 'node', 'node_modules');
const node22 = () => path.join(nodeModules, 'node', 'bin', 'node');
const wranglerJs = () => path.join(nodeModules, 'wrangler', 'bin', 'wrangler.js');

// The files scripts/edge-build.sh stages that a Workers deployment takes (workerd.capnp is for
// self-hosting only).
const DEPLOYED = ['wrangler.toml', 'worker.mjs', 'quiver-edge.mjs', 'quiver-edge.wasm'];

export function wranglerMissing() {
  for (const f of [node22(), wranglerJs()]) {
    if (!existsSync(f)) return `${f} is missing: scripts/setup.sh installs it`;
  }
  return '';
}

// The environment wrangler runs in: its own config and log directory, no metrics, no network.
function wranglerEnv(home) {
  return {
    PATH: process.env.PATH,
    HOME: home,
    XDG_CONFIG_HOME: path.join(home, 'config'),
    WRANGLER_SEND_METRICS: 'false',
    CLOUDFLARE_CF_FETCH_ENABLED: 'false',
    WRANGLER_LOG_PATH: path.join(home, 'logs'),
    CI: '1',
  };
}

// A temp copy of the deployment's files from `edgeDir`, with `vars` as its `.dev.vars`.
function stage(edgeDir, vars) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'quiver-wrangler-'));
  const project = path.join(dir, 'project');
  const home = path.join(dir, 'home');
  for (const d of [project, home]) mkdirSync(d, { recursive: true });
  for (const f of DEPLOYED) copyFileSync(path.join(edgeDir, f), path.join(project, f));
  if (vars) {
    // dotenv lines, single-quoted (taken literally: JSON keeps its double quotes).
    const lines = Object.entries(vars).map(([k, v]) => {
      if (/['\n]/.test(String(v))) throw new Error(`${k}: a quote or a newline in a .dev.vars value`);
      return `${k}='${v}'`;
    });
    writeFileSync(path.join(project, '.dev.vars'), `${lines.join('\n')}\n`, { mode: 0o600 });
  }
  return { dir, project, home };
}

// `wrangler deploy --dry-run` of the staged worker: resolves to wrangler's output; rejects with it
// when wrangler fails (a wrong path, a module rule that does not match, a bad compatibility
// setting).
export async function dryRun(edgeDir) {
  const { dir, project, home } = stage(edgeDir, null);
  try {
    return await new Promise((resolve, reject) => {
      execFile(node22(), [wranglerJs(), 'deploy', '--dry-run', '--outdir', path.join(dir, 'out')],
               { cwd: project, env: wranglerEnv(home), timeout: 120_000 },
               (err, stdout, stderr) => {
                 const out = `${stdout}${stderr}`;
                 if (err) reject(new Error(`wrangler deploy --dry-run failed: ${err.message}\n${out}`));
                 else resolve(out);
               });
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// `wrangler dev --local` serving the staged worker of `edgeDir` on a free loopback port, with
// `env` as its variables and secrets; the same interface as harness.mjs Workerd.
export class WranglerDev extends ServedProcess {
  static async start({ edgeDir, env = {}, logs = [] }) {
    const w = new WranglerDev();
    const { dir, project, home } = stage(edgeDir, env);
    w.dir = dir;
    w.port = await freePort();
    const inspector = await freePort();
    await w.launch({
      command: node22(),
      args: [wranglerJs(), 'dev', '--local', '--ip', '127.0.0.1', '--port', String(w.port),
             '--inspector-port', String(inspector), '--show-interactive-dev-session=false',
             '--log-level', 'warn'],
      options: { cwd: project, env: wranglerEnv(home) },
      logs, what: 'wrangler dev', timeoutMs: 60_000,
      exitHint: () => wranglerMissing() || 'see its output',
    });
    const health = await w.request('GET', '/healthz');
    if (health.status !== 200) {
      await w.stop();
      throw new Error(`wrangler dev: /healthz: ${health.text}`);
    }
    return w;
  }

  async stop() {
    await super.stop();
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
  }
}

// The committed deploy/wrangler.toml is what the staged one is (edge-build stages it unchanged).
export function stagedTomlIsCommitted(edgeDir) {
  return readFileSync(path.join(edgeDir, 'wrangler.toml'), 'utf8') ===
         readFileSync(path.join(repoRoot, 'deploy', 'wrangler.toml'), 'utf8');
}
