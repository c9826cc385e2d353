// Model-visible bytes of one exec result, before and after "one copy of
// every result": the bytes of `content` plus `structuredContent` (what a
// client that puts every part into the model's context sends it), for
// four cells, on
//   - before: an older gateway binary (CODEMODE_BIN_BEFORE);
//   - after: this build with results.form structured (the default), text
//     and both.
// Usage: CODEMODE_BIN=target/release/codemode CODEMODE_BIN_BEFORE=/path/to/old node e2e/bench-result-bytes.mjs
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { FIFTY_SUMS, servers } from "./harness.mjs";

const CELLS = {
  "small value": `return 42;`,
  "20-item list": `return { items: Array.from({ length: 20 }, (_, i) => ({ i, name: "item " + i })) };`,
  "50 upstream calls": FIFTY_SUMS,
  "failed": `text("before"); throw new Error("nope");`,
  "waiting": `await yield_control("later"); return 1;`,
};

function config(form) {
  const dir = mkdtempSync(join(tmpdir(), "codemode-bytes-"));
  const path = join(dir, "gateway.json");
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs: 5000 } },
    ...(form ? { results: { form } } : {}),
    mcpServers: { everything: { command: process.execPath, args: [servers.everything] } },
  }));
  return path;
}

async function measure(bin, form) {
  const transport = new StdioClientTransport({ command: bin, args: ["serve", "--config", config(form)], stderr: "ignore" });
  const client = new Client({ name: "bytes", version: "1.0.0" });
  await client.connect(transport);
  const out = {};
  for (const [name, code] of Object.entries(CELLS)) {
    const r = await client.callTool({ name: "exec", arguments: { code } });
    out[name] = Buffer.byteLength(JSON.stringify(r.content)) +
      (r.structuredContent === undefined ? 0 : Buffer.byteLength(JSON.stringify(r.structuredContent)));
  }
  await client.close();
  return out;
}

const before = process.env.CODEMODE_BIN_BEFORE;
if (!before) throw new Error("set CODEMODE_BIN_BEFORE to the binary to compare with");
const rows = {
  before: await measure(before, undefined),
  "after: structured (default)": await measure(process.env.CODEMODE_BIN, undefined),
  "after: text": await measure(process.env.CODEMODE_BIN, "text"),
  "after: both": await measure(process.env.CODEMODE_BIN, "both"),
};
console.log(`| | ${Object.keys(CELLS).join(" | ")} |`);
console.log(`|---|${Object.keys(CELLS).map(() => "---").join("|")}|`);
for (const [name, bytes] of Object.entries(rows)) {
  console.log(`| ${name} | ${Object.keys(CELLS).map((c) => bytes[c]).join(" | ")} |`);
}
