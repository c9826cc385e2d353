// End-to-end: the reference's debug switches on the gateway. With
// OPENCLAW_DEBUG_MODEL_PAYLOAD=tools (and the transport switch) the
// gateway logs the model-visible tool names of its tools/list answer —
// exactly exec and wait — and the payload check's verdict; with
// CODEMODE_DEBUG_MODEL_PAYLOAD=full-redacted it logs the answer itself,
// bounded. Nothing is logged without a switch.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { BIN, writeConfig } from "./harness.mjs";

/** Lists tools through `codemode serve` with `env`; returns its stderr. */
async function stderrOfToolsList(env) {
  const transport = new StdioClientTransport({
    command: BIN,
    args: ["serve", "--config", writeConfig({ flaky: false })],
    env: { ...process.env, CODEMODE_LOG: "warn", ...env },
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr.on("data", (c) => { stderr += c; });
  const client = new Client({ name: "codemode-e2e", version: "1.0.0" });
  await client.connect(transport);
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name), ["exec", "wait"]);
  await client.close();
  return stderr;
}

describe("debug switches", () => {
  test("tools and transport: the model-visible names and the verdict, nothing without a switch", async () => {
    const quiet = await stderrOfToolsList({});
    assert.doesNotMatch(quiet, /model-visible tools|model payload/);
    const logged = await stderrOfToolsList({
      OPENCLAW_DEBUG_MODEL_PAYLOAD: "tools",
      OPENCLAW_DEBUG_MODEL_TRANSPORT: "1",
      OPENCLAW_DEBUG_CODE_MODE: "1",
    });
    assert.match(logged, /code mode active for a client session.*visible=\["exec", "wait"\]/);
    assert.match(logged, /model-visible tools.*tools=\["exec", "wait"\]/);
    assert.match(logged, /model payload checked.*shape="?mcp-tools-list"?.*verdict="?ok/);
  });

  test("full-redacted: the payload itself, bounded", async () => {
    const logged = await stderrOfToolsList({ CODEMODE_DEBUG_MODEL_PAYLOAD: "full-redacted" });
    const line = logged.split("\n").find((l) => l.includes("model payload (redacted)"));
    assert.ok(line, logged);
    assert.match(line, /inputSchema/);
    assert.ok(line.length < 20_000, `bounded: ${line.length}`);
  });
});
