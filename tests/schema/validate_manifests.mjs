#!/usr/bin/env node
// Validates manifests written by the C++ code against schema/manifest.schema.json (JSON Schema
// 2020-12, ajv 8), tying the codec to the schema: the manifest tests write the canonical
// manifests they build from the real-peer fixtures into <build>/manifest-fixtures/.
//
//   node tests/schema/validate_manifests.mjs <dir-of-manifest-json> [<node_modules-dir>]
//
// Every *.json file in the directory must validate, and there must be at least one. Then a set
// of mutations of a valid manifest, each something the codec never writes, must be rejected:
// a schema that accepts everything would pass the first check alone.
import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const [dirArg, modulesArg] = process.argv.slice(2);
if (!dirArg) {
  console.error("usage: validate_manifests.mjs <dir-of-manifest-json> [<node_modules-dir>]");
  process.exit(2);
}
const dir = path.resolve(dirArg);
const nodeModules = path.resolve(modulesArg ?? path.join(root, "build/node/node_modules"));
const require = createRequire(path.join(nodeModules, "_.js"));
const Ajv2020 = require("ajv/dist/2020").default;

const schema = JSON.parse(readFileSync(path.join(root, "schema/manifest.schema.json"), "utf8"));
// strictRequired would refuse `required` in if/then branches, the idiom used for "present
// exactly when"; every other strict check stays on.
const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false });
const validate = ajv.compile(schema);

let failures = 0;
const files = readdirSync(dir).filter((f) => f.endsWith(".json")).sort();
if (files.length === 0) {
  console.error(`no manifest files in ${dir}`);
  process.exit(1);
}
const manifests = [];
for (const f of files) {
  const manifest = JSON.parse(readFileSync(path.join(dir, f), "utf8"));
  manifests.push(manifest);
  if (validate(manifest)) {
    console.log(`ok       ${f}`);
  } else {
    failures++;
    console.log(`INVALID  ${f}`);
    for (const e of validate.errors.slice(0, 10)) {
      console.log(`  ${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);
    }
  }
}

// A valid manifest with at least one tool, to mutate.
const base = manifests.find((m) => m.tools?.items?.length > 0);
if (!base) {
  console.error("no manifest with a tool to build the negative checks from");
  process.exit(1);
}
const mutations = {
  "missing format": (m) => { delete m.format; },
  "wrong format": (m) => { m.format = "quiver.manifest.v0"; },
  "unknown top-level field": (m) => { m.secret_headers = { authorization: "x" }; },
  "unknown list field": (m) => { m.tools.next_cursor = "c"; },
  "ok list with an error": (m) => { m.tools.error = { code: "TIMEOUT", message: "" }; },
  "failed list without error": (m) => {
    m.prompts = { ...m.prompts, state: "failed", items: [], hashes: {} };
    delete m.prompts.error;
  },
  "failed list with items": (m) => {
    m.tools.state = "failed";
    m.tools.error = { code: "TIMEOUT", message: "t" };
  },
  "absent list with items": (m) => { m.tools.state = "absent"; },
  "unknown state": (m) => { m.tools.state = "not_listed"; },
  "unknown error code": (m) => {
    m.resources = { state: "failed", items: [], hashes: {}, cache: {},
                    error: { code: "OOPS", message: "m" } };
  },
  "malformed hash": (m) => {
    m.tools.hashes[Object.keys(m.tools.hashes)[0]] = "sha256-short";
  },
  "tool without inputSchema": (m) => { delete m.tools.items[0].inputSchema; },
  "tool with empty name": (m) => { m.tools.items[0].name = ""; },
  "tool description not a string": (m) => { m.tools.items[0].description = 5; },
  "truncated without truncation": (m) => { m.truncated = true; delete m.truncation; },
  "truncation while not truncated": (m) => {
    m.truncated = false;
    m.truncation = { descriptions: 0, instructions: false,
                     dropped: { tools: 0, resources: 0, resource_templates: 0, prompts: 0 } };
  },
  "bad cache scope": (m) => { m.cache = { scope: "team" }; },
  "negative ttl": (m) => { m.cache = { ttl_ms: -1 }; },
  "issue with unknown list": (m) => {
    m.issues = [{ list: "widgets", index: 0, key: "", problem: "p" }];
  },
  "server without version": (m) => { delete m.server.version; },
};
for (const [name, mutate] of Object.entries(mutations)) {
  const m = structuredClone(base);
  mutate(m);
  if (validate(m)) {
    failures++;
    console.log(`ACCEPTED ${name} (the schema must reject it)`);
  } else {
    const why = validate.errors.map((e) => `${e.instancePath || "/"} ${e.keyword}`);
    console.log(`rejected ${name}: ${[...new Set(why)].slice(0, 3).join("; ")}`);
  }
}

if (failures > 0) {
  console.error(`${failures} failure(s)`);
  process.exit(1);
}
const rejected = Object.keys(mutations).length;
console.log(`${files.length} manifest(s) valid, ${rejected} mutations rejected`);
