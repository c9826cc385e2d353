// Loops one workload against `codemode serve` (or, with `direct`, the
// same 50 calls straight to the upstream) for profiling: writes the
// server process's pid to $TMPDIR/codemode-prof.pid once warm, then prints
// the median wall per exec and that process's CPU per exec (from
// /proc/<pid>/stat), for `perf record -p` / `perf stat` beside it.
// Usage: CODEMODE_BIN=... node e2e/prof-loop.mjs seq50|all50|trivial N [codemode|direct]
import { readFileSync, readdirSync, writeFileSync, mkdtempSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { BIN, FIFTY_SUMS, resultOf, servers } from "./harness.mjs";

const [workload = "seq50", n = "2000", system = "codemode"] = process.argv.slice(2);
const ALL_FIFTY = `
const rs = await Promise.all(Array.from({ length: 50 }, (_, i) => MCP.everything.getSum({ a: i, b: 1 })));
return rs.reduce((t, r) => t + Number(/is (\\d+)\\./.exec(r.content[0].text)[1]), 0);`;
const code = { seq50: FIFTY_SUMS, all50: ALL_FIFTY, trivial: "return 1" }[workload];
const dir = mkdtempSync(join(tmpdir(), "codemode-prof-"));
const config = join(dir, "gateway.json");
writeFileSync(config, JSON.stringify({
  tools: { codeMode: { enabled: true } },
  mcpServers: { everything: { command: process.execPath, args: [servers.everything] } },
}));
const transport = new StdioClientTransport(system === "direct" ? { command: process.execPath, args: [servers.everything] } : {
  command: BIN, args: ["serve", "--config", config], stderr: "inherit",
  env: { ...process.env, CODEMODE_LOG: "warn", CODEMODE_DATA_DIR: mkdtempSync(join(tmpdir(), "codemode-prof-data-")) },
});
const client = new Client({ name: "prof-loop", version: "1" });
await client.connect(transport);
const pid = transport.pid;
const direct = async () => { for (let i = 0; i < 50; i++) await client.callTool({ name: "get-sum", arguments: { a: i, b: 1 } }); return { status: "completed" }; };
const once = async () => system === "direct" ? direct() : resultOf(await client.callTool({ name: "exec", arguments: { code } }));
const cpuOf = (p) => { const f = readFileSync(`/proc/${p}/stat`, "utf8").split(") ")[1].split(" "); return (Number(f[11]) + Number(f[12])) * 10; };
const cpu = () => cpuOf(pid);
// The gateway's upstream (its child process), when there is one.
const children = (p) => readdirSync(`/proc/${p}/task`).flatMap((t) => readFileSync(`/proc/${p}/task/${t}/children`, "utf8").trim().split(/\s+/).filter(Boolean));
const upstreamCpu = () => children(pid).reduce((t, c) => t + cpuOf(c), 0);
for (let i = 0; i < 50; i++) await once();
console.error(`pid ${pid}`);
writeFileSync(join(tmpdir(), "codemode-prof.pid"), String(pid));
const u0 = upstreamCpu(); const c0 = cpu(); const t0 = performance.now(); const own0 = process.cpuUsage();
const walls = [];
for (let i = 0; i < Number(n); i++) {
  const t = performance.now();
  const r = await once();
  if (r.status !== "completed") throw new Error(JSON.stringify(r));
  walls.push(performance.now() - t);
}
const u1 = upstreamCpu(); const c1 = cpu(); const t1 = performance.now(); const own = process.cpuUsage(own0);
walls.sort((a, b) => a - b);
console.log(JSON.stringify({ workload, n: Number(n), medianMs: walls[walls.length >> 1].toFixed(3), cpuMsPerExec: ((c1 - c0) / Number(n)).toFixed(3), upstreamCpuMsPerExec: ((u1 - u0) / Number(n)).toFixed(3), clientCpuMsPerExec: ((own.user + own.system) / 1000 / Number(n)).toFixed(3), wallMsPerExec: ((t1 - t0) / Number(n)).toFixed(3) }));
await client.close();
