// End-to-end: progress. A client that sends a progress token with exec
// (the official SDK does when given `onprogress`) gets
// notifications/progress while the cell runs: nested calls started and
// answered, the upstream's own progress (server-everything's long-running
// operation reports each step), and the cell's progress(...); `progress`
// always grows. Without a token nothing is sent, and no notification
// follows the answer.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectStdio, resultOf, servers } from "./harness.mjs";

function config() {
  const dir = mkdtempSync(join(tmpdir(), "codemode-progress-"));
  const path = join(dir, "gateway.json");
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs: 10000 } },
    mcpServers: { everything: { command: process.execPath, args: [servers.everything] } },
  }));
  return path;
}

describe("progress notifications", () => {
  let client;
  before(async () => { ({ client } = await connectStdio(config())); });
  after(async () => { await client?.close(); });

  test("nested calls, upstream steps and the cell's own progress reach the client", async () => {
    const seen = [];
    const r = resultOf(await client.callTool(
      { name: "exec", arguments: { code: `
        await progress(1, 3, "looking up");
        const op = await MCP.everything.triggerLongRunningOperation({ duration: 1.2, steps: 4 });
        await progress(3, 3, "done");
        return op.content[0].text;` } },
      undefined,
      { onprogress: (p) => seen.push(p), timeout: 20000 },
    ));
    assert.equal(r.status, "completed", JSON.stringify(r));
    const messages = seen.map((p) => p.message);
    // Updates that come faster than one per 100 ms fold into the next one
    // (the first "looking up" may be folded into "calling ..."): progress
    // counts them all.
    assert.ok(seen[0].progress >= 1, JSON.stringify(seen));
    assert.ok(messages.some((m) => /^mcp:everything:trigger-long-running-operation: \d\/4$/.test(m) || m === "calling mcp:everything:trigger-long-running-operation"), JSON.stringify(messages));
    assert.ok(messages.some((m) => /trigger-long-running-operation: [1-4]\/4/.test(m)), `upstream steps relayed: ${JSON.stringify(messages)}`);
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress, "progress grows");
    // The last update before the answer is the cell's "done" (flushed, not lost).
    assert.equal(messages.at(-1), "done (3/3)", JSON.stringify(messages));
    const count = seen.length;
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(seen.length, count, "nothing after the answer");
  });

  test("without a token nothing is sent", async () => {
    let notified = 0;
    client.setNotificationHandler?.((await import("@modelcontextprotocol/sdk/types.js")).ProgressNotificationSchema, () => { notified++; });
    const r = resultOf(await client.callTool({ name: "exec", arguments: { code: `await progress(1); await MCP.everything.getSum({ a: 1, b: 2 }); return 1;` } }));
    assert.equal(r.status, "completed");
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(notified, 0);
  });
});
