// End-to-end: a stateless MCP client (the official TypeScript SDK 2.x,
// pinned to protocol 2026-07-28: no initialize, no session id) against the
// gateway over HTTP without authentication, next to a 2025 client with a
// session. Every stateless request reaches a fresh handler: a run started
// by one request is resumed by another through its id (the capability);
// the session client's runs stay its own. A stateless client that answers
// forms is asked about approvals in the result (`input_required`): the SDK
// answers through its elicitation handler and sends the call again, and the
// run goes on.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { connectHttp, exec, here, resultOf, servers, startHttpGateway, wait } from "./harness.mjs";

let gateway, modern, legacy;
const asked = [];
const answers = [];

before(async () => {
  const dir = mkdtempSync(join(tmpdir(), "codemode-stateless-"));
  const path = join(dir, "gateway.json");
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs: 500 } },
    mcpServers: {
      slow: { command: process.execPath, args: [join(here, "servers/slow.mjs")] },
      annotated: { command: process.execPath, args: [join(here, "servers/annotated.mjs")] },
      everything: { command: process.execPath, args: [servers.everything] },
    },
  }));
  gateway = await startHttpGateway(path);
  modern = new Client({ name: "stateless-e2e", version: "1.0.0" }, {
    versionNegotiation: { mode: { pin: "2026-07-28" } },
    capabilities: { elicitation: { form: {} } },
  });
  modern.setRequestHandler("elicitation/create", async (request) => {
    asked.push(request.params);
    const next = answers.shift() ?? "deny";
    if (next === "decline") return { action: "decline" };
    if (typeof next === "object") return { action: "accept", content: next };
    return { action: "accept", content: { decision: next } };
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

test("a stateless client is asked about an approval in the result and the run goes on", async () => {
  answers.push("allow_once");
  const r = resultOf(await modern.callTool({
    name: "exec",
    arguments: { code: `text("before"); const seen = await MCP.annotated.peek({});
      const d = await MCP.annotated.drop({ table: "t" }); text("after");
      return [seen.content[0].text, d.content[0].text];` },
  }));
  assert.equal(r.status, "completed", JSON.stringify(r));
  assert.deepEqual(r.value, ["peeked", "dropped t"]);
  assert.equal(asked.length, 1);
  assert.match(asked[0].message, /"drop" of MCP server "annotated"/);
  const decision = asked[0].requestedSchema.properties.decision;
  assert.deepEqual(decision.enum ?? decision.oneOf?.map((o) => o.const), ["allow_once", "deny"],
    "no session to remember a choice in: allow once or deny");
  // The whole run once: output and receipts from before the question too.
  assert.deepEqual(r.output.map((o) => o.text), ["before", "after"], JSON.stringify(r));
  assert.deepEqual(r.nestedCalls.map((c) => [c.toolId, c.outcome]),
    [["mcp:annotated:peek", "ok"], ["mcp:annotated:drop", "ok"]]);
});

test("a stateless client's decline denies the call; it never ran", async () => {
  answers.push("decline");
  const r = resultOf(await modern.callTool({
    name: "exec",
    arguments: { code: `try { await MCP.annotated.drop({ table: "u" }); return "ran"; }
      catch (e) { return e.code; }` },
  }));
  assert.equal(r.status, "completed", JSON.stringify(r));
  assert.equal(r.value, "approval_denied");
  const runs = resultOf(await modern.callTool({
    name: "exec", arguments: { code: `return JSON.parse((await MCP.annotated.runs({})).content[0].text);` },
  }));
  assert.equal(runs.value.drop, 1, "only the allowed drop ran");
});

test("a forged requestState is refused and decides nothing", async () => {
  const raw = await modern.request({
    method: "tools/call",
    params: { name: "exec", arguments: { code: "return 1" }, requestState: "codemode.approvals.v1:{\"runId\":\"nope\"}",
      inputResponses: { x: { action: "accept", content: { decision: "allow_once" } } } },
  });
  const r = resultOf(raw);
  assert.equal(r.status, "failed", JSON.stringify(r));
  assert.match(r.error, /finished, failed, or never existed|another owner|expired/);
});

test("an upstream's question mid-call reaches the stateless client in the result; its answer reaches the tool", async () => {
  const before = asked.length;
  answers.push({ name: "Ada Lovelace", check: true });
  const r = resultOf(await modern.callTool({
    name: "exec",
    arguments: { code: `text("asking");
      const r = await MCP.everything.triggerElicitationRequest({});
      return r.content.map((c) => c.text).join("\\n");` },
  }));
  assert.equal(r.status, "completed", JSON.stringify(r));
  assert.equal(asked.length - before, 1);
  assert.equal(asked.at(-1).message, "Please provide inputs for the following fields:");
  assert.match(r.value, /Ada Lovelace/);
  assert.deepEqual(r.output.map((o) => o.text), ["asking"], "output from before the question is kept");
});

test("an answer naming a question no gateway process holds is refused with what to do", async () => {
  const raw = await modern.request({
    method: "tools/call",
    params: { name: "exec", arguments: { code: "return 1" }, requestState: "codemode.parked.v1:0123456789abcdef0123456789abcdef",
      inputResponses: { "elicitation-1": { action: "decline" } } },
  });
  const r = resultOf(raw);
  assert.equal(r.status, "failed", JSON.stringify(r));
  assert.match(r.error, /no question of that requestState is open in this gateway.*run the cell again/);
});
