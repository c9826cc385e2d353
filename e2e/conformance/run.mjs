// The official MCP conformance suite against codemode, both sides, one
// scenario at a time, compared with `baseline.yml`:
// - server: `codemode serve --http` (with server-memory behind it) is the
//   server under test, for every server scenario;
// - client: `client.mjs` turns each client scenario into codemode commands
//   (see there).
// A scenario passes when none of its checks is a FAILURE or WARNING. One
// that fails and is not in the baseline fails the run, and so does a
// baseline entry that passes now (remove it) or has no reason.
//
//   CODEMODE_BIN=target/debug/codemode node e2e/conformance/run.mjs [--only SCENARIO]...
//
// Run by `cargo xtask conformance` with the Node 22 this directory
// installs (the suite needs it).
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";

const here = dirname(fileURLToPath(import.meta.url));
const BIN = process.env.CODEMODE_BIN;
if (!BIN) {
  console.error("set CODEMODE_BIN to the codemode binary");
  process.exit(2);
}
const SUITE = join(here, "node_modules/@modelcontextprotocol/conformance/dist/index.js");
const only = process.argv.flatMap((arg, i, all) => (all[i - 1] === "--only" ? [arg] : []));
const baseline = YAML.parse(readFileSync(join(here, "baseline.yml"), "utf8")) ?? {};
const out = mkdtempSync(join(tmpdir(), "codemode-conformance-results-"));

/** Runs a command; resolves with its output (stdout and stderr) and code. */
function run(command, args, { env = process.env, timeoutMs = 180000 } = {}) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { env, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (c) => { output += c; });
    child.stderr.on("data", (c) => { output += c; });
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

/** The scenario names the suite lists for one side. */
async function scenarios(side) {
  const { output } = await run(process.execPath, [SUITE, "list"]);
  const section = side === "server" ? /Server scenarios[^\n]*\n([\s\S]*?)(\n\n|$)/ : /Client scenarios[^\n]*\n([\s\S]*?)(\n\n|$)/;
  const body = section.exec(output)?.[1] ?? "";
  return [...body.matchAll(/^\s+-\s+(\S+)/gm)].map((m) => m[1]);
}

/** The checks a run left in its results directory (the newest one for the
 * scenario; the suite names server runs `server-<scenario>-<time>`). */
function checksOf(dir, side, scenario) {
  const parent = join(dir, dirname(scenario));
  const prefix = `${side === "server" ? "server-" : ""}${scenario.split("/").at(-1)}-`;
  if (!existsSync(parent)) return [];
  const runs = readdirSync(parent).filter((d) => d.startsWith(prefix)).sort();
  const file = runs.length ? join(parent, runs.at(-1), "checks.json") : null;
  return file && existsSync(file) ? JSON.parse(readFileSync(file, "utf8")) : [];
}

function verdict(checks) {
  const bad = checks.filter((c) => c.status === "FAILURE" || c.status === "WARNING");
  if (checks.length === 0) return { passed: false, why: "no checks ran" };
  if (bad.length) return { passed: false, why: bad.map((c) => `${c.status} ${c.id}: ${c.description}`).join("; ") };
  return { passed: true, why: `${checks.length} checks` };
}

/** `codemode serve --http` with a real upstream; resolves with its URL. */
async function startGateway() {
  const config = join(out, "server.json");
  const memory = join(here, "../node_modules/@modelcontextprotocol/server-memory/dist/index.js");
  writeFileSync(config, JSON.stringify({ mcpServers: { memory: { command: process.execPath, args: [memory] } }, store: "memory" }));
  const child = spawn(BIN, ["serve", "--config", config, "--http", "127.0.0.1:0"], {
    env: { ...process.env, CODEMODE_LOG: "warn", MEMORY_FILE_PATH: join(out, "memory.jsonl") },
    stdio: ["ignore", "ignore", "pipe"],
  });
  const url = await new Promise((resolve, reject) => {
    let seen = "";
    const timer = setTimeout(() => reject(new Error(`the gateway did not start:\n${seen}`)), 30000);
    child.stderr.on("data", (chunk) => {
      seen += chunk;
      const m = /serving MCP at (http:\/\/\S+\/mcp)\n/.exec(seen);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on("exit", (code) => reject(new Error(`the gateway exited with ${code}:\n${seen}`)));
  });
  return { url, stop: () => child.kill("SIGTERM") };
}

const problems = [];
const summary = [];

async function side(name, runOne) {
  const expected = baseline[name] ?? {};
  for (const [scenario, reason] of Object.entries(expected)) {
    if (typeof reason !== "string" || reason.trim().length < 20) {
      problems.push(`baseline ${name}.${scenario}: every entry says why it does not apply (a sentence)`);
    }
  }
  const all = await scenarios(name);
  for (const scenario of Object.keys(expected)) {
    if (!all.includes(scenario)) problems.push(`baseline ${name}.${scenario}: the suite has no such scenario`);
  }
  for (const scenario of all) {
    if (only.length && !only.includes(scenario)) continue;
    const started = Date.now();
    const { code, output } = await runOne(scenario);
    const checks = checksOf(join(out, name), name, scenario);
    const { passed, why } = verdict(checks);
    const ms = Date.now() - started;
    const inBaseline = scenario in expected;
    let mark;
    if (passed && !inBaseline) mark = "pass";
    else if (!passed && inBaseline) mark = "expected failure";
    else if (passed) {
      mark = "PASSES NOW";
      problems.push(`${name} ${scenario} passes now: remove it from baseline.yml`);
    } else {
      mark = "FAIL";
      problems.push(`${name} ${scenario} fails: ${why}\n${output.slice(-3000)}`);
    }
    summary.push(`${name.padEnd(6)} ${scenario.padEnd(44)} ${mark.padEnd(16)} ${why.slice(0, 160)} (${ms} ms, exit ${code})`);
    console.log(summary.at(-1));
  }
}

const gateway = await startGateway();
try {
  await side("server", (scenario) =>
    run(process.execPath, [SUITE, "server", "--url", gateway.url, "--scenario", scenario, "-o", join(out, "server")]),
  );
} finally {
  gateway.stop();
}
await side("client", (scenario) =>
  run(process.execPath, [
    SUITE, "client",
    "--command", `"${process.execPath}" "${join(here, "client.mjs")}"`,
    "--scenario", scenario,
    "--timeout", "60000",
    "-o", join(out, "client"),
  ], { env: { ...process.env, CODEMODE_BIN: BIN } }),
);

console.log(`\nresults in ${out}`);
if (problems.length) {
  console.log(`\n${problems.length} problem(s):\n- ${problems.join("\n- ")}`);
  process.exit(1);
}
console.log("conformance: every scenario passed or is a listed, explained exception");
