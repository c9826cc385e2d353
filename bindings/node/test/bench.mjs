// What the Node package costs next to the runtime's own (Rust) tools, in
// one process, workloads interleaved round by round:
//
// - trivial exec (`return 1`) through the in-process API;
// - one cell awaiting 50 tool calls in sequence: JS tools (`execute`
//   functions) vs scripted tools the runtime answers itself in Rust, in
//   the same session — the difference is the JS dispatch;
// - the same with `Promise.all` of 50;
// - a cell of 50 `MCP.everything.getSum` calls in-process (`mcpServers`)
//   and through the bin as a gateway (`npx codemode serve`, official
//   TypeScript MCP client over stdio).
//
// Run from the test project `cargo xtask test-npm --release` installs:
//   cargo xtask test-npm --release && cd target/package/test-project && node bench.mjs 200
import { createRequire } from "node:module";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CodeMode } from "codemode";

const rounds = Number(process.argv[2] ?? 200);
const require = createRequire(import.meta.url);
const everything = require.resolve("@modelcontextprotocol/server-everything/dist/index.js");
const servers = { everything: { command: process.execPath, args: [everything] } };

const cm = await CodeMode.create({
  config: { maxPendingToolCalls: 64 },
  tools: [{ name: "echo_js", description: "Echo (JS)", execute: async (input) => input }],
  scripted: [{ source: "client", owner: "app", name: "echo_rust", description: "Echo (Rust)", echoInput: true }],
  mcpServers: servers,
});

const dir = mkdtempSync(join(tmpdir(), "codemode-bench-"));
const config = join(dir, "gateway.json5");
writeFileSync(config, JSON.stringify({ store: "memory", tools: { codeMode: { enabled: true } }, mcpServers: servers }));
const client = new Client({ name: "bench", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command: "npx", args: ["codemode", "serve", "--config", config], stderr: "inherit" }));

const sequential = (tool) => `let s = 0; for (let i = 0; i < 50; i++) { const r = await tools.${tool}({ i }); s += r.i; } return s;`;
const parallel = (tool) => `const rs = await Promise.all(Array.from({ length: 50 }, (_, i) => tools.${tool}({ i }))); return rs.reduce((s, r) => s + r.i, 0);`;
// e2e/harness.mjs's FIFTY_SUMS: the cell e2e/bench-gateway.mjs measures.
const getSums = "let s = 0; for (let i = 0; i < 50; i++) { const r = await MCP.everything.getSum({ a: i, b: 1 }); s += Number(/is (\\d+)\\./.exec(r.content[0].text)[1]); } return s;";

function check(name, r, want) {
  if (r.status !== "completed" || r.value !== want) throw new Error(`${name}: ${JSON.stringify(r).slice(0, 300)}`);
}

// The runtime's own duration of each trivial exec (telemetry.durationMs,
// measured in Rust): the rest of the wall time is the Node API's.
const inside = [];
const workloads = {
  "trivial exec (in-process)": async () => {
    const r = await cm.exec({ code: "return 1" });
    check("trivial", r, 1);
    inside.push(r.telemetry.durationMs);
  },
  "50 sequential, JS tools": async () => check("js", await cm.exec({ code: sequential("echo_js") }), 1225),
  "50 sequential, Rust tools": async () => check("rust", await cm.exec({ code: sequential("echo_rust") }), 1225),
  "Promise.all of 50, JS tools": async () => check("js all", await cm.exec({ code: parallel("echo_js") }), 1225),
  "Promise.all of 50, Rust tools": async () => check("rust all", await cm.exec({ code: parallel("echo_rust") }), 1225),
  "50 MCP getSum, in-process": async () => check("mcp", await cm.exec({ code: getSums }), 1275),
  "50 MCP getSum, npx codemode serve": async () => {
    const r = await client.callTool({ name: "exec", arguments: { code: getSums } });
    check("gateway", r.structuredContent ?? JSON.parse(r.content[0].text), 1275);
  },
};

const times = Object.fromEntries(Object.keys(workloads).map((k) => [k, []]));
for (let round = -5; round < rounds; round++) {
  for (const [name, run] of Object.entries(workloads)) {
    const start = performance.now();
    await run();
    if (round >= 0) times[name].push(performance.now() - start);
  }
}
await client.close();
await cm.close();
rmSync(dir, { recursive: true, force: true });

const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};
const median = (name) => quantile(times[name], 0.5);
console.log(`rounds: ${rounds} (after 5 warm-up rounds), node ${process.version}`);
console.log("| workload | median ms | p90 ms |");
console.log("|---|---|---|");
for (const name of Object.keys(workloads)) {
  console.log(`| ${name} | ${median(name).toFixed(3)} | ${quantile(times[name], 0.9).toFixed(3)} |`);
}
const insideMedian = quantile(inside.slice(5), 0.5);
console.log(`\ntrivial exec: ${median("trivial exec (in-process)").toFixed(3)} ms wall in JS, ${insideMedian.toFixed(3)} ms of it in the runtime (telemetry.durationMs): the Node API adds ${(median("trivial exec (in-process)") - insideMedian).toFixed(3)} ms`);
const ratio = (a, b) => (median(a) / median(b)).toFixed(2);
const perCall = (a, b) => (((median(a) - median(b)) / 50) * 1000).toFixed(1);
console.log(`JS ÷ Rust tools, 50 sequential: ${ratio("50 sequential, JS tools", "50 sequential, Rust tools")}× (JS dispatch ${perCall("50 sequential, JS tools", "50 sequential, Rust tools")} µs per call)`);
console.log(`JS ÷ Rust tools, Promise.all of 50: ${ratio("Promise.all of 50, JS tools", "Promise.all of 50, Rust tools")}×`);
console.log(`gateway ÷ in-process, 50 MCP calls: ${ratio("50 MCP getSum, npx codemode serve", "50 MCP getSum, in-process")}×`);
