// The Cloudflare deployment, checked by wrangler itself (tests/edge/wrangler.mjs):
//   1. the staged wrangler.toml is the committed deploy/wrangler.toml, unchanged;
//   2. `wrangler deploy --dry-run` bundles the staged worker with it: the entry worker.mjs, the
//      glue as an ES module and the wasm as a compiled module, and every [vars] binding;
//   3. every variable the toml sets, and every secret it names, is a setting deploy/edge.md
//      documents, and each documented secret is named in the toml (what to `wrangler secret put`).
// (`wrangler dev --local` serving the edge end-to-end checks is wasm.edge_e2e_wrangler:
// run.mjs --runtime wrangler.)
//
//   node tests/edge/deploy_check.mjs [--edge-dir build/wasm/edge]
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';

import { edgeDirArg, repoRoot, runTests } from './harness.mjs';
import { dryRun, stagedTomlIsCommitted, wranglerMissing } from './wrangler.mjs';

const edgeDir = edgeDirArg();
const toml = readFileSync(path.join(repoRoot, 'deploy', 'wrangler.toml'), 'utf8');
const edgeDoc = readFileSync(path.join(repoRoot, 'deploy', 'edge.md'), 'utf8');

// The `[vars]` table's keys, in order (the toml is flat: `KEY = "value"  # comment` lines).
function tomlVars(text) {
  const at = text.indexOf('\n[vars]');
  assert.ok(at >= 0, 'deploy/wrangler.toml has a [vars] table');
  const body = text.slice(at + '\n[vars]'.length).split(/\n\[/)[0];
  return [...body.matchAll(/^([A-Z][A-Z0-9_]*)\s*=/gm)].map((m) => m[1]);
}

// The settings deploy/edge.md's table documents, and which of them it marks secret.
function documentedSettings(text) {
  // A row's first cell names one variable or several (`A`, `B`); the second says **secret**.
  const rows = [...text.matchAll(/^\| (`[A-Z][A-Z0-9_]*`(?:, `[A-Z][A-Z0-9_]*`)*) \| ([^|]*)\|/gm)]
    .map((r) => ({ names: [...r[1].matchAll(/`([A-Z0-9_]+)`/g)].map((m) => m[1]),
                   secret: r[2].includes('**secret**') }));
  return {
    all: rows.flatMap((r) => r.names),
    secrets: rows.filter((r) => r.secret).flatMap((r) => r.names),
  };
}

const tests = [
  {
    name: 'the staged wrangler.toml is the committed one',
    fn: () => assert.ok(stagedTomlIsCommitted(edgeDir),
                        `${edgeDir}/wrangler.toml differs from deploy/wrangler.toml`),
  },
  {
    name: 'wrangler deploy --dry-run bundles the worker, the glue and the wasm, with every var',
    fn: async () => {
      const out = await dryRun(edgeDir);
      assert.match(out, /--dry-run: exiting now/, out);
      assert.match(out, /quiver-edge\.mjs\s*│\s*esm/, out);
      assert.match(out, /quiver-edge\.wasm\s*│\s*compiled-wasm/, out);
      for (const name of tomlVars(toml)) assert.match(out, new RegExp(`env\\.${name} `), out);
    },
  },
  {
    name: 'every var and secret of the toml is documented in deploy/edge.md, every secret named',
    fn: () => {
      const documented = documentedSettings(edgeDoc);
      assert.ok(documented.secrets.length >= 3, 'deploy/edge.md marks its secrets');
      for (const name of tomlVars(toml)) {
        assert.ok(documented.all.includes(name), `${name} (toml [vars]) is not in deploy/edge.md`);
        assert.ok(!documented.secrets.includes(name), `${name} is a secret: not in [vars]`);
      }
      for (const secret of documented.secrets) {
        assert.ok(toml.includes(secret), `the secret ${secret} is not named in wrangler.toml`);
      }
    },
  },
];

async function main() {
  const missing = wranglerMissing();
  if (missing) {
    console.log(`skipped: ${missing}`);
    process.exit(77);
  }
  const started = Date.now();
  const failed = await runTests(tests);
  console.log(`${failed ? 'FAILED' : 'passed'}: ${tests.length} checks in ${Date.now() - started} ms`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
