// End-to-end: one copy of every result. With the default
// `results.form: "structured"` the tools carry an outputSchema, the
// result is `structuredContent` (the model's view: a short telemetry
// summary) with a one-paragraph text, and the full telemetry (numbers
// rounded) is in `_meta["codemode/telemetry"]`; `text` sends the JSON text
// only; `both` sends both in full. Model-visible bytes are checked against
// one copy of the result union.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FIFTY_SUMS, connectStdio, servers } from "./harness.mjs";

function config(form) {
  const dir = mkdtempSync(join(tmpdir(), "codemode-results-"));
  const path = join(dir, "gateway.json");
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs: 3000 } },
    ...(form ? { results: { form } } : {}),
    mcpServers: { everything: { command: process.execPath, args: [servers.everything] } },
  }));
  return path;
}

const CELLS = {
  value: `return { items: Array.from({ length: 20 }, (_, i) => ({ i, name: "item " + i })) };`,
  sums: FIFTY_SUMS,
  failed: `text("before"); throw new Error("nope");`,
  waiting: `await yield_control("later"); return 1;`,
};

/** Bytes a client that puts every part into the model's context sends it. */
const modelBytes = (r) => Buffer.byteLength(JSON.stringify(r.content)) + (r.structuredContent === undefined ? 0 : Buffer.byteLength(JSON.stringify(r.structuredContent)));

for (const form of [undefined, "text", "both"]) {
  describe(`results.form ${form ?? "(default: structured)"}`, () => {
    let client;
    before(async () => { ({ client } = await connectStdio(config(form))); });
    after(async () => { await client?.close(); });

    test("the tool list says what the results are", async () => {
      const { tools } = await client.listTools();
      for (const tool of tools) {
        if (form === "text") assert.equal(tool.outputSchema, undefined);
        else assert.deepEqual(tool.outputSchema.required, ["status"]);
      }
    });

    test("each result reaches the client once, telemetry goes to _meta", async () => {
      for (const [name, code] of Object.entries(CELLS)) {
        const r = await client.callTool({ name: "exec", arguments: { code } });
        const union = r.structuredContent ?? JSON.parse(r.content[0].text);
        const one = Buffer.byteLength(JSON.stringify(union));
        assert.equal(r.isError === true, union.status === "failed", name);
        // The model's telemetry is a summary; the full one is for operators.
        assert.deepEqual(Object.keys(union.telemetry).sort(), ["durationMs", "nestedCallCount"], name);
        const full = r._meta["codemode/telemetry"];
        assert.ok(full.visibleTools && full.catalogSize > 0, JSON.stringify(full));
        assert.ok(Number.isInteger(full.durationMs * 1000) || String(full.durationMs).split(".")[1].length <= 3, `rounded: ${full.durationMs}`);
        assert.ok(Number.isInteger(union.telemetry.durationMs * 10) || String(union.telemetry.durationMs).split(".")[1].length <= 1);
        if (form === undefined) {
          assert.ok(r.structuredContent, name);
          assert.ok(r.content[0].text.startsWith(`${union.status}`), r.content[0].text);
          assert.ok(Buffer.byteLength(r.content[0].text) <= 700, `summary of ${name}: ${r.content[0].text.length}`);
          assert.ok(modelBytes(r) <= one * 1.15 + 700, `${name}: ${modelBytes(r)} bytes for a ${one}-byte result`);
          if (name === "waiting") assert.match(r.content[0].text, /^waiting \(yield\): runId run_[0-9a-f]{32}, 0 calls pending; call wait/);
          if (name === "failed") assert.match(r.content[0].text, /^failed \(nested_tool_failed\)|^failed: /);
        } else if (form === "text") {
          assert.equal(r.structuredContent, undefined);
          assert.equal(r.content.length, 1);
          // One copy: the JSON text (Rust may print 5.0 where JS prints 5).
          assert.ok(Math.abs(Buffer.byteLength(r.content[0].text) - one) <= 16, `${name}: ${r.content[0].text.length} vs ${one}`);
        } else {
          assert.deepEqual(JSON.parse(r.content[0].text), r.structuredContent);
        }
      }
    });
  });
}

describe("a 20 MB upstream result by handle", () => {
  let client;
  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), "codemode-handle-"));
    const path = join(dir, "gateway.json");
    writeFileSync(path, JSON.stringify({
      tools: { codeMode: { enabled: true, timeoutMs: 30000 } },
      mcpServers: { documents: { command: process.execPath, args: [join(servers.annotated, "..", "documents.mjs")] } },
    }));
    ({ client } = await connectStdio(path));
  });
  after(async () => { await client?.close(); });

  test("the cell reads it in slices inside the default memory limit", async () => {
    const r = await client.callTool({ name: "exec", arguments: { code: `
      const doc = await MCP.documents.document({ mb: 20 });
      let read = 0, seen = -1;
      for (let at = 0; at < doc.textBytes; at += 1 << 20) {
        const piece = await doc.text(at, at + (1 << 20));
        read += piece.length;
        const i = piece.indexOf("NEEDLE");
        if (i >= 0) seen = at + i;
      }
      const needle = await doc.find("NEEDLE");
      return { textBytes: doc.textBytes, read, seen, needle, word: await doc.text(needle, needle + 6) };` } }, undefined, { timeout: 60000 });
    const union = r.structuredContent;
    assert.equal(union.status, "completed", JSON.stringify(union).slice(0, 1000));
    assert.deepEqual(union.value, { textBytes: 20 << 20, read: 20 << 20, seen: 19 << 20, needle: 19 << 20, word: "NEEDLE" });
    const telemetry = r._meta["codemode/telemetry"];
    assert.ok(telemetry.vmMemoryBytes < 64 << 20, `VM memory ${telemetry.vmMemoryBytes}`);
  });
});
