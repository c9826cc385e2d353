// The in-process API as a user installs it: `npm install codemode-*.tgz`
// in a fresh project (`cargo xtask test-npm`), then `import { CodeMode }`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CodeMode } from "codemode";

const require = createRequire(import.meta.url);
const everything = require.resolve("@modelcontextprotocol/server-everything/dist/index.js");

const add = {
  name: "add",
  description: "Add two numbers",
  inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
  execute: async ({ a, b }) => a + b,
};

test("cells call JS tools; a throwing tool fails that call only, as a tool error", async () => {
  const seen = [];
  const cm = await CodeMode.create({
    tools: [
      { ...add, execute: async (input, ctx) => { seen.push(ctx); return input.a + input.b; } },
      { name: "boom", description: "Always fails", execute: () => { throw new Error("the disk is on fire"); } },
      { name: "rejects", description: "Rejects", execute: async () => Promise.reject(new Error("later fire")) },
      { name: "cyclic", description: "Returns no JSON", execute: () => { const o = {}; o.o = o; return o; } },
    ],
  });
  try {
    assert.deepEqual(cm.catalog().sort(), ["client:app:add", "client:app:boom", "client:app:cyclic", "client:app:rejects"]);
    const r = await cm.exec({
      code: `
        const sum = await tools.add({ a: 2, b: 3 });
        const errors = [];
        for (const name of ["boom", "rejects", "cyclic"]) {
          try { await tools[name]({}); } catch (e) { errors.push(e.message); }
        }
        return { sum, errors };`,
    }, { callId: "call_1" });
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.equal(r.value.sum, 5);
    assert.match(r.value.errors[0], /the disk is on fire/);
    assert.match(r.value.errors[1], /later fire/);
    assert.match(r.value.errors[2], /not JSON/);
    assert.deepEqual(r.nestedCalls.map((c) => c.outcome), ["ok", "failed", "failed", "failed"]);
    assert.equal(seen.length, 1);
    assert.equal(seen[0].parentCallId, "call_1");
    assert.equal(seen[0].toolId, "client:app:add");
    assert.equal(seen[0].context.agentId, "node");
  } finally {
    await cm.close();
  }
});

test("the cell's own errors are failed results, never rejections; TypeScript runs", async () => {
  const cm = await CodeMode.create({ tools: [add] });
  try {
    const thrown = await cm.exec({ code: "throw new Error('nope')" });
    assert.equal(thrown.status, "failed");
    assert.match(thrown.error, /nope/);
    const unknown = await cm.exec({ code: "return await tools.nosuch({})" });
    assert.equal(unknown.status, "failed");
    assert.match(unknown.error, /nosuch/);
    const ts = await cm.exec({ code: "const n: number = await tools.add({ a: 1, b: 1 }); return n;", language: "typescript" });
    assert.equal(ts.status, "completed");
    assert.equal(ts.value, 2);
    const badLanguage = await cm.exec({ code: "return 1", language: "cobol" });
    assert.equal(badLanguage.status, "failed");
    assert.equal(badLanguage.code, "unsupported_language");
  } finally {
    await cm.close();
  }
});

test("bad options are TypeErrors naming the field; a bad config rejects naming the key", async () => {
  assert.throws(() => new CodeMode({ tools: [{ name: "x" }] }), /tools\[0\] \(x\)\.execute must be a function/);
  assert.throws(() => new CodeMode({ tools: [add, add] }), /already defined/);
  assert.throws(() => new CodeMode({ tools: [{ ...add, source: "mcp" }] }), /MCP tools come from mcpServers/);
  assert.throws(() => new CodeMode({ approve: "yes" }), /options\.approve must be a function/);
  await assert.rejects(CodeMode.create({ config: { timeoutMs: "soon" } }), /timeoutMs/);
  await assert.rejects(CodeMode.create({ store: "ftp://x" }), /options\.store/);
  const cm = new CodeMode({ tools: [add] });
  assert.throws(() => cm.surface(), /await cm\.ready\(\)/);
  await cm.ready();
  await cm.close();
  await assert.rejects(cm.exec({ code: "return 1" }), /closed/);
});

test("surface() is exactly exec and wait with JSON schemas", async () => {
  const cm = await CodeMode.create({ tools: [add] });
  try {
    const surface = cm.surface();
    assert.deepEqual(surface.map((t) => t.name), ["exec", "wait"]);
    assert.equal(surface[0].inputSchema.type, "object");
    assert.ok(surface[0].inputSchema.properties.code);
    assert.deepEqual(surface[1].inputSchema.required, ["runId"]);
    assert.ok(!JSON.stringify(surface).includes("Add two numbers"), "hidden tools stay out of the surface");
  } finally {
    await cm.close();
  }
});

test("a suspended run is resumed by wait; progress reaches the callback", async () => {
  const events = [];
  const cm = await CodeMode.create({ tools: [add], onProgress: (e) => events.push(e) });
  try {
    const first = await cm.exec({ code: "const a = await tools.add({ a: 1, b: 2 }); progress(1, 2, 'half'); await yield_control(); return await tools.add({ a, b: 10 });" });
    assert.equal(first.status, "waiting", JSON.stringify(first));
    assert.equal(first.reason, "yield");
    assert.match(first.runId, /^run_[0-9a-f]{32}$/);
    const done = await cm.wait({ runId: first.runId });
    assert.equal(done.status, "completed", JSON.stringify(done));
    assert.equal(done.value, 13);
    const again = await cm.wait({ runId: first.runId });
    assert.equal(again.status, "failed");
    assert.ok(events.some((e) => e.kind === "cell" && e.message === "half"), JSON.stringify(events));
    assert.ok(events.some((e) => e.kind === "callFinished" && e.toolId === "client:app:add" && e.ok));
  } finally {
    await cm.close();
  }
});

test("approvals: the callback approves, denies, or leaves the call for cm.approve", async () => {
  const asked = [];
  let answer = true;
  const cm = await CodeMode.create({
    tools: [{ ...add, needsApproval: true }],
    approve: async (request) => { asked.push(request); return answer; },
  });
  try {
    const approved = await cm.exec({ code: "return await tools.add({ a: 4, b: 4 })" });
    assert.equal(approved.status, "completed", JSON.stringify(approved));
    assert.equal(approved.value, 8);
    assert.equal(asked[0].toolId, "client:app:add");
    assert.match(asked[0].inputSummary, /4/);

    answer = { deny: "not on Sundays" };
    const denied = await cm.exec({ code: "try { return await tools.add({ a: 1, b: 1 }) } catch (e) { return [e.code, e.message] }" });
    assert.equal(denied.value[0], "approval_denied");
    assert.match(denied.value[1], /not on Sundays/);

    answer = undefined;
    const held = await cm.exec({ code: "return await tools.add({ a: 5, b: 5 })" });
    assert.equal(held.status, "waiting", JSON.stringify(held));
    assert.equal(held.reason, "approval");
    const pending = cm.pendingApprovals();
    assert.equal(pending.length, 1);
    assert.equal(pending[0].runId, held.runId);
    cm.approve(held.runId, pending[0].callId);
    const resumed = await cm.wait({ runId: held.runId });
    assert.equal(resumed.status, "completed", JSON.stringify(resumed));
    assert.equal(resumed.value, 10);

    answer = () => {};
    const broken = await cm.exec({ code: "try { return await tools.add({ a: 1, b: 1 }) } catch (e) { return e.code }" });
    assert.equal(broken.value, "approval_denied", "an answer that is not a decision denies (fail closed)");
  } finally {
    await cm.close();
  }
});

test("beforeToolCall hooks block or rewrite calls; a throwing hook blocks", async () => {
  const cm = await CodeMode.create({
    tools: [add],
    beforeToolCall: async (event) => {
      if (event.toolKind !== "tool") return undefined;
      if (event.input.a === 13) return { block: "unlucky" };
      if (event.input.a === 7) return { input: { a: 70, b: event.input.b } };
      if (event.input.a === 0) throw new Error("hook crashed");
      return undefined;
    },
  });
  try {
    const r = await cm.exec({
      code: `
        const out = {};
        for (const a of [1, 7, 13, 0]) {
          try { out[a] = await tools.add({ a, b: 1 }); } catch (e) { out[a] = e.code + ": " + e.message; }
        }
        return out;`,
    });
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.equal(r.value[1], 2);
    assert.equal(r.value[7], 71);
    assert.match(r.value[13], /approval_denied: .*unlucky/);
    assert.match(r.value[0], /approval_denied: .*hook crashed/);
  } finally {
    await cm.close();
  }
});

test("MCP servers in the gateway's config format sit beside the JS tools", async () => {
  const cm = await CodeMode.create({
    tools: [add],
    mcpServers: { everything: { command: process.execPath, args: [everything] } },
  });
  try {
    assert.ok(cm.catalog().includes("mcp:everything:echo"), cm.catalog().join(" "));
    const r = await cm.exec({
      code: `
        const hits = await tools.search("add two numbers together", { limit: 3 });
        const echo = await MCP.everything.echo({ message: "hi" });
        return { echo: echo.content[0].text, js: await tools.add({ a: 1, b: 2 }), found: hits.map((h) => h.id) };`,
    });
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.equal(r.value.echo, "Echo: hi");
    assert.equal(r.value.js, 3);
    assert.ok(r.value.found.length > 0);
  } finally {
    await cm.close();
  }
});

test("a file store: a run left waiting by one CodeMode is resumed by the next", async () => {
  const dir = mkdtempSync(join(tmpdir(), "codemode-node-"));
  const store = `file:${join(dir, "runs.db")}`;
  try {
    const first = await CodeMode.create({ tools: [add], store, owner: "test-owner" });
    const waiting = await first.exec({ code: "const a = await tools.add({ a: 20, b: 1 }); await yield_control(); return a * 2" });
    assert.equal(waiting.status, "waiting");
    await first.close();
    // Another owner on the same store cannot take the run.
    const stranger = await CodeMode.create({ tools: [add], store, owner: "someone-else" });
    try {
      const refused = await stranger.wait({ runId: waiting.runId });
      assert.equal(refused.status, "failed", JSON.stringify(refused));
    } finally {
      await stranger.close();
    }
    const second = await CodeMode.create({ tools: [add], store, owner: "test-owner" });
    try {
      const done = await second.wait({ runId: waiting.runId });
      assert.equal(done.status, "completed", JSON.stringify(done));
      assert.equal(done.value, 42);
    } finally {
      await second.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("many concurrent JS tool calls: Promise.all over 200 items", async () => {
  let inFlight = 0;
  let most = 0;
  const cm = await CodeMode.create({
    tools: [{
      name: "slow_double", description: "Doubles after a tick",
      execute: async ({ n }) => { inFlight++; most = Math.max(most, inFlight); await new Promise((r) => setTimeout(r, 2)); inFlight--; return n * 2; },
    }],
  });
  try {
    const r = await cm.exec({ code: "const xs = await Promise.all(Array.from({ length: 200 }, (_, n) => tools.slow_double({ n }))); return xs.reduce((a, b) => a + b, 0);" });
    assert.equal(r.status, "completed", JSON.stringify(r).slice(0, 500));
    assert.equal(r.value, 2 * (199 * 200) / 2);
    assert.ok(most > 1 && most <= 16, `in flight at once: ${most} (maxPendingToolCalls 16)`);
  } finally {
    await cm.close();
  }
});

test("scripted tools are answered by the runtime beside the JS ones; a bad entry names its field", async () => {
  const cm = await CodeMode.create({
    tools: [add],
    scripted: [
      { source: "client", owner: "app", name: "echo", echoInput: true },
      { source: "plugin", owner: "util", name: "offline", error: "the app is offline" },
    ],
  });
  try {
    assert.deepEqual(cm.catalog().sort(), ["client:app:add", "client:app:echo", "plugin:util:offline"]);
    const r = await cm.exec({ code: "const e = await tools.echo({ n: await tools.add({ a: 1, b: 1 }) }); try { await tools.offline({}) } catch (x) { return [e, x.message] }" });
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.deepEqual(r.value[0], { n: 2 });
    assert.match(r.value[1], /the app is offline/);
  } finally {
    await cm.close();
  }
  await assert.rejects(CodeMode.create({ scripted: [{ source: "client", name: "x", echoInput: true, reslt: 1 }] }), /options\.scripted: .*reslt/);
  assert.throws(() => new CodeMode({ scripted: {} }), /options\.scripted must be an array/);
});
