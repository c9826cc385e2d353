// End-to-end: the control layer of `codemode serve` as MCP users meet it.
// The official TypeScript MCP client answers the gateway's elicitation
// requests (allow once, allow for the session, decline); an upstream built
// with the official SDK marks its tools readOnlyHint / destructiveHint;
// a hook command blocks one tool, rewrites another's input and hangs on
// one exec (blocked at its timeout); a client without elicitation is
// refused (fail closed) unless the operator endpoint is on, where
// `codemode approvals` approves the call.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import {
  BIN, connectHttp, connectStdio, exec, here, servers, startHttpGateway, wait,
} from "./harness.mjs";

const run = promisify(execFile);

/** A gateway config with only the annotated server, plus `extra` top-level keys. */
function controlConfig(extra = {}, server = {}) {
  const dir = mkdtempSync(join(tmpdir(), "codemode-control-"));
  const config = {
    tools: { codeMode: { enabled: true, timeoutMs: 5000 } },
    mcpServers: {
      annotated: { command: process.execPath, args: [servers.annotated], ...server },
    },
    ...extra,
  };
  const path = join(dir, "gateway.json");
  writeFileSync(path, JSON.stringify(config, null, 2));
  return path;
}

const runs = (client) => exec(client, "return JSON.parse((await MCP.annotated.runs({})).content[0].text)");

/** An elicitation handler answering from a queue, recording each request. */
function answering(answers) {
  const asked = [];
  const onElicit = async (params) => {
    asked.push(params);
    const next = answers.shift() ?? "deny";
    if (next === "decline") return { action: "decline" };
    return { action: "accept", content: { decision: next } };
  };
  return { asked, onElicit };
}

for (const transport of ["stdio", "http"]) {
  describe(`approvals through elicitation over ${transport}`, () => {
    let client, close, stopGateway;
    const answers = [];
    const { asked, onElicit } = answering(answers);

    before(async () => {
      const config = controlConfig({ approvals: { mode: "destructive" } }, { approveTools: ["no*"] });
      if (transport === "stdio") {
        ({ client, close } = await connectStdio(config, { onElicit }));
      } else {
        const gateway = await startHttpGateway(config);
        stopGateway = gateway.stop;
        ({ client, close } = await connectHttp(gateway.url, { onElicit }));
      }
    });

    after(async () => {
      await close?.();
      await stopGateway?.();
    });

    test("read-only tools run without asking; a destructive one asks and runs once allowed", async () => {
      answers.push("allow_once");
      const r = await exec(client, `
        const seen = await MCP.annotated.peek({});
        const dropped = await MCP.annotated.drop({ table: "users", password: "hunter2" });
        return [seen.content[0].text, dropped.content[0].text];
      `);
      assert.equal(r.status, "completed", JSON.stringify(r));
      assert.deepEqual(r.value, ["peeked", "dropped users"]);
      assert.equal(asked.length, 1, "only the destructive call was put to the user");
      const { message, requestedSchema } = asked[0];
      assert.match(message, /"drop" of MCP server "annotated"/);
      assert.match(message, /destructiveHint/);
      assert.match(message, /users/);
      assert.doesNotMatch(message, /hunter2/, "the input summary masks secrets");
      assert.deepEqual(requestedSchema.required, ["decision"]);
      assert.deepEqual(r.nestedCalls.map((c) => c.outcome), ["ok", "ok"]);
    });

    test("a tool without annotations asks under the default mode: MCP's defaults make it possibly destructive", async () => {
      const before = asked.length;
      answers.push("allow_once");
      const r = await exec(client, `return (await MCP.annotated.touch({})).content[0].text;`);
      assert.equal(r.status, "completed", JSON.stringify(r));
      assert.equal(r.value, "touched");
      assert.equal(asked.length - before, 1, "the unannotated call was put to the user");
      assert.match(asked.at(-1).message, /"touch" of MCP server "annotated"/);
      assert.match(asked.at(-1).message, /may be destructive/);
      assert.match(asked.at(-1).message, /Annotations: none/);
    });

    test("approveTools asks for a tool its annotations would not; allow for the session asks once", async () => {
      const before = asked.length;
      answers.push("allow_session");
      const r = await exec(client, `
        const a = await MCP.annotated.note({ text: "one" });
        const b = await MCP.annotated.note({ text: "two" });
        return [a.content[0].text, b.content[0].text];
      `);
      assert.equal(r.status, "completed", JSON.stringify(r));
      assert.deepEqual(r.value, ["noted one", "noted two"]);
      assert.equal(asked.length - before, 1, "allowed for the session: asked once");
    });

    test("a declined call rejects with approval_denied and the earlier call is not re-run", async () => {
      const ranBefore = (await runs(client)).value;
      answers.push("decline");
      const r = await exec(client, `
        await MCP.annotated.peek({});
        try { await MCP.annotated.drop({ table: "orders" }); return "ran"; }
        catch (e) { return { code: e.code, message: e.message }; }
      `);
      assert.equal(r.status, "completed", JSON.stringify(r));
      assert.equal(r.value.code, "approval_denied");
      assert.match(r.value.message, /declined/);
      assert.deepEqual(r.nestedCalls.map((c) => c.outcome), ["ok", "denied"]);
      const ranAfter = (await runs(client)).value;
      assert.equal(ranAfter.peek, ranBefore.peek + 1, "the first call ran exactly once");
      assert.equal(ranAfter.drop, ranBefore.drop, "the denied call never ran");
    });

    test("uncaught, a denial fails the cell with nested_tool_failed", async () => {
      answers.push("deny");
      const r = await exec(client, `await MCP.annotated.drop({ table: "t" }); return 1;`);
      assert.equal(r.status, "failed", JSON.stringify(r));
      assert.equal(r.code, "nested_tool_failed");
      assert.match(r.error, /denied/);
    });
  });
}

describe("a client without elicitation", () => {
  let client, close;
  before(async () => {
    ({ client, close } = await connectStdio(controlConfig({ approvals: { mode: "writes" } })));
  });
  after(async () => close?.());

  test("is refused calls that need approval (fail closed), with how to configure it", async () => {
    const r = await exec(client, `
      const seen = await MCP.annotated.peek({});
      try { await MCP.annotated.note({ text: "x" }); return "ran"; }
      catch (e) { return { seen: seen.content[0].text, code: e.code, message: e.message }; }
    `);
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.equal(r.value.seen, "peeked", "read-only calls still run under mode writes");
    assert.equal(r.value.code, "approval_denied");
    assert.match(r.value.message, /does not support elicitation/);
    assert.match(r.value.message, /approvals\.mode/);
    assert.equal((await runs(client)).value.note, undefined, "the refused call never ran");
  });
});

describe("operator approvals", () => {
  let gateway, client, close;
  const token = "operator-token-0123456789";
  const approvals = (...args) =>
    run(BIN, ["approvals", ...args, "--admin", gateway.admin], {
      env: { ...process.env, CODEMODE_ADMIN_TOKEN: token },
    });

  before(async () => {
    gateway = await startHttpGateway(controlConfig(), {
      args: ["--admin-listen", "127.0.0.1:0"],
      env: { CODEMODE_ADMIN_TOKEN: token },
    });
    ({ client, close } = await connectHttp(gateway.url));
  });
  after(async () => {
    await close?.();
    await gateway?.stop();
  });

  test("a call the client cannot be asked about waits; codemode approvals lists and approves it", async () => {
    assert.ok(gateway.admin, "the gateway printed its operator endpoint");
    const r = await exec(client, `return (await MCP.annotated.drop({ table: "logs" })).content[0].text;`);
    assert.equal(r.status, "waiting", JSON.stringify(r));
    assert.equal(r.reason, "approval");
    const [pending] = r.pendingToolCalls;
    assert.equal(pending.awaitingApproval, true);
    assert.equal(pending.toolId, "mcp:annotated:drop");
    assert.match(pending.inputSummary, /logs/);

    const listed = JSON.parse((await approvals("list")).stdout);
    assert.deepEqual(
      listed.pending.map((p) => [p.runId, p.callId, p.toolId]),
      [[r.runId, pending.id, "mcp:annotated:drop"]],
    );
    // The operator sees why it was held: the gateway's default mode.
    assert.match(listed.pending[0].reason, /may be destructive.*\(approvals.mode "destructive"\)/);
    await assert.rejects(
      run(BIN, ["approvals", "list", "--admin", gateway.admin], {
        env: { ...process.env, CODEMODE_ADMIN_TOKEN: "wrong-token-0123456789" },
      }),
      /401/,
      "a wrong token is refused",
    );
    await approvals("approve", r.runId, pending.id);
    const done = await wait(client, r.runId);
    assert.equal(done.status, "completed", JSON.stringify(done));
    assert.equal(done.value, "dropped logs");
  });

  test("an operator's denial reaches the guest with its reason", async () => {
    const r = await exec(client, `try { await MCP.annotated.drop({ table: "x" }); } catch (e) { return e.code + ": " + e.message; }`);
    assert.equal(r.reason, "approval", JSON.stringify(r));
    await approvals("deny", r.runId, r.pendingToolCalls[0].id, "--reason", "not during business hours");
    const done = await wait(client, r.runId);
    assert.match(done.value, /^approval_denied: .*not during business hours/);
  });
});

describe("a before_tool_call hook command", () => {
  let client, close;
  before(async () => {
    const config = controlConfig({
      approvals: { mode: "never" },
      hooks: { beforeToolCall: { command: [process.execPath, join(here, "servers/hook.mjs")], timeoutMs: 1500 } },
    });
    ({ client, close } = await connectStdio(config));
  });
  after(async () => close?.());

  test("blocks one tool, rewrites another's input, and allows the rest", async () => {
    const r = await exec(client, `
      const echoed = (await MCP.annotated.echo({ text: "original" })).content[0].text;
      let blocked;
      try { await MCP.annotated.blocked({}); } catch (e) { blocked = { code: e.code, message: e.message }; }
      const dropped = (await MCP.annotated.drop({ table: "t" })).content[0].text;
      return { echoed, blocked, dropped };
    `);
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.equal(r.value.echoed, "rewritten");
    assert.equal(r.value.blocked.code, "approval_denied");
    assert.match(r.value.blocked.message, /blocked by the test hook/);
    assert.equal(r.value.dropped, "dropped t", "mode never: no approval asked");
    assert.equal((await runs(client)).value.blocked, undefined, "the blocked tool never ran");
  });

  test("a hook that does not answer in time blocks (fail closed)", async () => {
    const r = await exec(client, `// hang the hook
      return 1;`);
    assert.equal(r.status, "failed", JSON.stringify(r));
    assert.equal(r.code, "approval_denied");
    assert.match(r.error, /did not answer within timeoutMs \(1500 ms\)/);
  });
});
