// Gateway benchmark, measured from a real MCP client (the official
// TypeScript SDK) over stdio:
//   - one exec whose cell makes 50 sequential calls to a stdio upstream
//     (server-everything's get-sum), end to end as the client sees it;
//   - the same 50 calls made by the client directly against the same
//     upstream server (no gateway), for scale;
//   - the model-visible tool list: exec + wait, next to the same catalog
//     exposed directly (every upstream tool with its schema).
// Usage: CODEMODE_BIN=target/release/codemode node e2e/bench.mjs [rounds]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { FIFTY_SUMS as cell, connectStdio, exec, servers, writeConfig } from "./harness.mjs";

const rounds = Number(process.argv[2] ?? 200);

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function p90(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length * 0.9)];
}

const { client, close } = await connectStdio(writeConfig({ timeoutMs: 10000, flaky: false }));
const warm = await exec(client, cell);
if (warm.status !== "completed" || warm.value !== 1275) throw new Error(JSON.stringify(warm));
for (let i = 0; i < 20; i++) await exec(client, cell);
const gateway = [];
for (let i = 0; i < rounds; i++) {
  const t = performance.now();
  const r = await exec(client, cell);
  gateway.push(performance.now() - t);
  if (r.value !== 1275) throw new Error(JSON.stringify(r));
}
const { tools } = await client.listTools();
const modelVisible = Buffer.byteLength(JSON.stringify(tools));
await close();

// The same upstream, called directly by the client, 50 times in a row.
const direct = new Client({ name: "bench-direct", version: "1" });
await direct.connect(new StdioClientTransport({ command: process.execPath, args: [servers.everything], stderr: "ignore" }));
const directTimes = [];
for (let i = 0; i < rounds / 4 + 20; i++) {
  const t = performance.now();
  for (let j = 0; j < 50; j++) await direct.callTool({ name: "get-sum", arguments: { a: j, b: 1 } });
  if (i >= 20) directTimes.push(performance.now() - t);
}
const everythingTools = (await direct.listTools()).tools;
await direct.close();

const memory = new Client({ name: "bench-direct", version: "1" });
await memory.connect(new StdioClientTransport({ command: process.execPath, args: [servers.memory], stderr: "ignore" }));
const memoryTools = (await memory.listTools()).tools;
await memory.close();
const directList = Buffer.byteLength(JSON.stringify([...everythingTools, ...memoryTools]));

console.log(JSON.stringify({
  rounds,
  fiftyCallsThroughGatewayMs: { median: +median(gateway).toFixed(2), p90: +p90(gateway).toFixed(2) },
  fiftyCallsDirectMs: { median: +median(directTimes).toFixed(2), p90: +p90(directTimes).toFixed(2) },
  toolListBytes: { gatewayExecWait: modelVisible, sameCatalogDirect: directList, directTools: everythingTools.length + memoryTools.length },
}, null, 2));
