// End-to-end: a stateless MCP client (the official TypeScript SDK 2.x,
// pinned to protocol 2026-07-28: no initialize, no session id) against the
// gateway over HTTP without authentication, next to a 2025 client with a
// session. Every stateless request reaches a fresh handler: a run started
// by one request is resumed by another through its id (the capability);
// the session client's runs stay its own.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { connectHttp, exec, here, resultOf, startHttpGateway, wait } from "./harness.mjs";

let gateway, modern, legacy;

before(async () => {
  const dir = mkdtempSync(join(tmpdir(), "codemode-stateless-"));
  const path = join(dir, "gateway.json");
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs: 500 } },
    mcpServers: { slow: { command: process.execPath, args: [join(here, "servers/slow.mjs")] } },
  }));
  gateway = await startHttpGateway(path);
  modern = new Client({ name: "stateless-e2e", version: "1.0.0" }, {
    versionNegotiation: { mode: { pin: "2026-07-28" } },
  });
  await modern.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  legacy = await connectHttp(gateway.url);
});
after(async () => {
  await modern?.close();
  await legacy?.close();
  await gateway?.stop();
});

test("the stateless client negotiates 2026-07-28 and sees exactly exec and wait", async () => {
  assert.equal(modern.getNegotiatedProtocolVersion(), "2026-07-28");
  const { tools } = await modern.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), ["exec", "wait"]);
});

test("a run started by one stateless request is resumed by another through its id", async () => {
  const started = resultOf(await modern.callTool({
    name: "exec",
    arguments: { code: `return (await MCP.slow.sleep({ ms: 1200, tag: "stateless" })).content[0].text;` },
  }));
  assert.equal(started.status, "waiting", JSON.stringify(started));
  let result = started;
  for (let i = 0; i < 20 && result.status === "waiting"; i++) {
    result = resultOf(await modern.callTool({ name: "wait", arguments: { runId: started.runId } }));
  }
  assert.equal(result.status, "completed", JSON.stringify(result));
  assert.equal(result.value, "slept stateless");
});

test("a session client's run stays its own; the 2025 client still works unchanged", async () => {
  const started = await exec(legacy.client, `return (await MCP.slow.sleep({ ms: 1200, tag: "legacy" })).content[0].text;`);
  assert.equal(started.status, "waiting", JSON.stringify(started));
  const stranger = resultOf(await modern.callTool({ name: "wait", arguments: { runId: started.runId } }));
  assert.equal(stranger.status, "failed");
  assert.match(stranger.error, /another owner/);
  let result = started;
  for (let i = 0; i < 20 && result.status === "waiting"; i++) result = await wait(legacy.client, started.runId);
  assert.equal(result.value, "slept legacy", JSON.stringify(result));
});
