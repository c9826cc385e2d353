// End-to-end: an upstream server that asks its user mid-call
// (server-everything's trigger-elicitation-request sends
// elicitation/create from inside tools/call). The gateway declares
// elicitation upstream and relays the question to the MCP client whose run
// made the call; the answer goes back and the tool's result reaches the
// cell. A client without elicitation makes the upstream's request fail at
// once with the protocol's error (the cell finishes, nothing hangs).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { BIN, connectStdio, exec, servers } from "./harness.mjs";

function config() {
  const dir = mkdtempSync(join(tmpdir(), "codemode-elicit-"));
  const path = join(dir, "gateway.json");
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs: 8000 } },
    approvals: { mode: "never" },
    mcpServers: { everything: { command: process.execPath, args: [servers.everything] } },
  }));
  return path;
}

const CELL = `
  const r = await MCP.everything.triggerElicitationRequest({});
  return { text: r.content.map((c) => c.text).join("\\n"), isError: r.isError ?? false };`;

describe("elicitation relayed from an upstream", () => {
  let asking, asked = [];
  let silent;
  before(async () => {
    asking = await connectStdio(config(), {
      onElicit: (params) => {
        asked.push(params);
        return { action: "accept", content: { name: "Ada Lovelace", check: true } };
      },
    });
    silent = await connectStdio(config());
  });
  after(async () => {
    await asking?.close();
    await silent?.close();
  });

  test("the client whose run made the call is asked, and its answer goes back", async () => {
    const r = await exec(asking.client, CELL);
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.equal(asked.length, 1);
    assert.equal(asked[0].message, "Please provide inputs for the following fields:");
    assert.deepEqual(asked[0].requestedSchema.required, ["name"]);
    assert.match(r.value.text, /User provided the requested information/);
    assert.match(r.value.text, /Ada Lovelace/);
  });

  test("a client without elicitation: the upstream's request fails at once, nothing hangs", async () => {
    const started = Date.now();
    const r = await exec(silent.client, `
      try { ${CELL} } catch (e) { return { thrown: e.message }; }`);
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.ok(Date.now() - started < 5000, `answered in ${Date.now() - started} ms`);
    const said = JSON.stringify(r.value);
    assert.match(said, /does not support form elicitation|-32601|Method not found/i, said);
    assert.equal(asked.length, 1, "the other client was not asked");
  });

  test("under codemode exec there is no client: the upstream gets -32601 at once, no other client is asked", async () => {
    const cell = join(mkdtempSync(join(tmpdir(), "codemode-elicit-cell-")), "cell.js");
    writeFileSync(cell, `try { ${CELL} } catch (e) { return { thrown: e.message }; }`);
    const started = Date.now();
    const { stdout } = await promisify(execFile)(BIN, ["exec", "--config", config(), cell], { env: process.env });
    const r = JSON.parse(stdout);
    assert.equal(r.status, "completed", stdout);
    assert.ok(Date.now() - started < 8000, `answered in ${Date.now() - started} ms`);
    const said = JSON.stringify(r.value);
    // server-everything reports the error it got back in its result.
    assert.match(said, /-32601|no MCP client is connected to the run/, said);
    assert.doesNotMatch(said, /-32600/, said);
    assert.equal(asked.length, 1, "the other client was not asked");
  });
});
