// Approval round trip, measured from a real MCP client (the official
// TypeScript SDK) over stdio, side by side in one gateway:
//   - plain: an exec whose cell makes one call to a read-only tool (no
//     approval);
//   - approved: the same cell calling a destructive tool, approved by the
//     client's elicitation handler at once ("allow_once").
// The approval's gateway time is what `approved` adds over `plain` minus
// the time the client spent answering (from the elicitation request's
// arrival in the handler to the handler's return, which the client owns).
// Also: 50 calls to tools that need no approval with the control layer
// configured (a mode that asks for nothing but destructive tools).
// Usage: CODEMODE_BIN=target/release/codemode node e2e/bench-approvals.mjs [rounds]
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectStdio, exec, servers } from "./harness.mjs";

const rounds = Number(process.argv[2] ?? 200);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p90 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)];

const dir = mkdtempSync(join(tmpdir(), "codemode-bench-approvals-"));
const config = join(dir, "gateway.json");
writeFileSync(config, JSON.stringify({
  tools: { codeMode: { enabled: true, timeoutMs: 10000 } },
  approvals: { mode: "destructive" },
  mcpServers: { annotated: { command: process.execPath, args: [servers.annotated] } },
}));

// What the client owns: from the request's arrival in its handler to the
// handler's answer (the wire both ways is the gateway's to pay).
let arrived = 0;
let answered = 0;
const { client, close } = await connectStdio(config, {
  onElicit: async () => {
    arrived = performance.now();
    const answer = { action: "accept", content: { decision: "allow_once" } };
    answered = performance.now();
    return answer;
  },
});

const plainCell = `return (await MCP.annotated.peek({})).content[0].text;`;
const approvedCell = `return (await MCP.annotated.drop({ table: "t" })).content[0].text;`;
const fiftyCell = `let n = 0; for (let i = 0; i < 50; i++) n += (await MCP.annotated.peek({})).content.length; return n;`;

for (let i = 0; i < 30; i++) {
  await exec(client, plainCell);
  await exec(client, approvedCell);
}
const plain = [];
const approved = [];
const clientTime = [];
for (let i = 0; i < rounds; i++) {
  // Interleaved, so both see the same machine.
  let t = performance.now();
  let r = await exec(client, plainCell);
  plain.push(performance.now() - t);
  if (r.value !== "peeked") throw new Error(JSON.stringify(r));
  t = performance.now();
  r = await exec(client, approvedCell);
  approved.push(performance.now() - t);
  clientTime.push(answered - arrived);
  if (r.value !== "dropped t") throw new Error(JSON.stringify(r));
}
const fifty = [];
for (let i = 0; i < rounds / 4; i++) {
  const t = performance.now();
  const r = await exec(client, fiftyCell);
  fifty.push(performance.now() - t);
  if (r.value !== 50) throw new Error(JSON.stringify(r));
}
await close();

const added = median(approved) - median(plain);
console.log(JSON.stringify({
  rounds,
  plainExecMs: { median: median(plain), p90: p90(plain) },
  approvedExecMs: { median: median(approved), p90: p90(approved) },
  approvalAddsMs: added,
  clientHandlerMs: median(clientTime),
  fiftyReadOnlyCallsMs: { median: median(fifty), p90: p90(fifty) },
}, null, 2));
