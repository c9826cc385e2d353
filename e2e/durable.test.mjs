// End-to-end: durable runs through the real gateway and a real MCP client
// (the official TypeScript SDK over streamable HTTP, bearer-token auth, so
// runs belong to the principal across sessions and processes).
//  - the embedded file store: a run waiting on two calls survives SIGKILL
//    of the gateway; after a restart on the same store, `wait` delivers the
//    call that finished while the run waited and rejects the one whose
//    process died with `interrupted` — neither runs twice;
//  - stdio gateways of one user (no auth, the default store in one data
//    directory): a run one window's gateway left waiting is resumed by
//    another window's gateway running at the same time, and a run of a
//    SIGKILLed gateway by the next one (its dead call `interrupted`);
//  - a call held for approval when a stdio gateway is SIGKILLed is asked
//    again of the next gateway's client, and runs once when allowed;
//  - an approval outlives the gateway: a call held for an operator's
//    approval when the gateway is SIGKILLed is listed by the next gateway's
//    operator endpoint, approved there, and runs once (never
//    `interrupted`: it never started);
//  - two gateways on one real redis-server: exec on the first, wait on the
//    second (the call still running on the first is delivered), SIGKILL of
//    the first mid-call gives `interrupted` on the second, and a call held
//    on the first is approved through the second's operator endpoint.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { promisify } from "node:util";
import { mkdtempSync, readFileSync, writeFileSync, existsSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BIN, connectHttp, connectStdio, exec, freePort, here, startHttpGateway, wait } from "./harness.mjs";

const ALICE = "alice-token-0123456789abcdef";
const auth = { headers: { authorization: `Bearer ${ALICE}` } };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A gateway config over the slow server, logging its calls to `log`;
 * with `approve`, the same server again as `held`, whose calls need a
 * human's approval. */
function durableConfig(dir, name, { timeoutMs, log, startMs, approve }) {
  const path = join(dir, `${name}.json`);
  const slow = {
    command: process.execPath, args: [join(here, "servers/slow.mjs")],
    env: { SLOW_LOG: log, ...(startMs ? { SLOW_START_MS: String(startMs) } : {}) },
  };
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs } },
    auth: { bearerTokens: [{ name: "alice", token: ALICE }] },
    mcpServers: { slow, ...(approve ? { held: { ...slow, approveTools: ["sleep"] } } : {}) },
  }));
  return path;
}

const OPERATOR = "operator-token-0123456789";
const operator = { args: ["--admin-listen", "127.0.0.1:0"], env: { CODEMODE_ADMIN_TOKEN: OPERATOR } };

/** `codemode approvals ...` against `gateway`'s operator endpoint. */
async function approvals(gateway, ...args) {
  const { stdout } = await promisify(execFile)(BIN, ["approvals", ...args, "--admin", gateway.admin], {
    env: { ...process.env, CODEMODE_ADMIN_TOKEN: OPERATOR },
  });
  return stdout;
}

/** The call ids `gateway`'s operator sees held for run `runId`. */
async function held(gateway, runId) {
  const listed = JSON.parse(await approvals(gateway, "list"));
  return listed.pending.filter((p) => p.runId === runId).map((p) => p.callId);
}

/** The calls the slow server started, sorted (`start <tag>`). */
function calls(log) {
  return lines(log).filter((l) => l.startsWith("start ")).sort();
}

function lines(log) {
  return existsSync(log) ? readFileSync(log, "utf8").trim().split("\n") : [];
}

/** A real redis-server on a free port, durable (append-only, fsync always). */
async function startRedis() {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "codemode-redis-"));
  const child = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "",
    "--appendonly", "yes", "--appendfsync", "always", "--dir", dir], { stdio: "ignore" });
  const exited = new Promise((resolve) => child.on("exit", resolve));
  for (let i = 0; ; i++) {
    const up = await new Promise((resolve) => {
      const socket = createConnection({ port, host: "127.0.0.1" }, () => { socket.end(); resolve(true); });
      socket.on("error", () => resolve(false));
    });
    if (up) break;
    if (i > 400) throw new Error("redis-server did not start (is Debian's redis-server installed?)");
    await sleep(25);
  }
  return { url: `redis://127.0.0.1:${port}/0`, stop: async () => { child.kill("SIGKILL"); await exited; } };
}

describe("the embedded file store", () => {
  test("a waiting run survives SIGKILL and a restart: finished calls are delivered, dead ones are interrupted, none runs twice", async () => {
    const dir = mkdtempSync(join(tmpdir(), "codemode-durable-"));
    const log = join(dir, "calls.log");
    const config = durableConfig(dir, "gateway", { timeoutMs: 800, log });
    const store = ["--store", `file:${join(dir, "runs.db")}`];
    let gateway = await startHttpGateway(config, { args: store });
    let client = await connectHttp(gateway.url, auth);
    const started = await exec(client.client, `
      text("before");
      const quick = MCP.slow.sleep({ ms: 1200, tag: "quick" }).then((r) => r.content[0].text);
      const long = MCP.slow.sleep({ ms: 600000, tag: "long" })
        .then((r) => r.content[0].text, (e) => e.code + ": " + e.message);
      return [await quick, await long];`);
    assert.equal(started.status, "waiting", JSON.stringify(started));
    // The quick call answers while the run waits: its result is stored.
    for (let i = 0; !lines(log).includes("done quick"); i++) {
      assert.ok(i < 300, "the quick call never answered");
      await sleep(50);
    }
    await sleep(500);
    await client.close().catch(() => {});
    await gateway.kill();

    gateway = await startHttpGateway(config, { args: store });
    client = await connectHttp(gateway.url, auth);
    const resumed = await wait(client.client, started.runId);
    assert.equal(resumed.status, "completed", JSON.stringify(resumed));
    assert.equal(resumed.value[0], "slept quick");
    assert.match(resumed.value[1], /^interrupted: .*may or may not have taken effect/);
    assert.deepEqual(calls(log), ["start long", "start quick"]);
    // The run is over: it is gone from the store too.
    const again = await wait(client.client, started.runId);
    assert.equal(again.code, "invalid_input");
    await client.close();
    await gateway.stop();
  });

  test("a wait sent right after a restart, while the upstream still starts, resumes a run that calls it again", async () => {
    const dir = mkdtempSync(join(tmpdir(), "codemode-durable-"));
    const log = join(dir, "calls.log");
    const store = ["--store", `file:${join(dir, "runs.db")}`];
    let gateway = await startHttpGateway(durableConfig(dir, "gateway", { timeoutMs: 800, log }), { args: store });
    let client = await connectHttp(gateway.url, auth);
    const started = await exec(client.client, `
      const first = (await MCP.slow.sleep({ ms: 1200, tag: "first" })).content[0].text;
      return [first, (await MCP.slow.sleep({ ms: 1, tag: "after" })).content[0].text];`);
    assert.equal(started.status, "waiting", JSON.stringify(started));
    for (let i = 0; !lines(log).includes("done first"); i++) {
      assert.ok(i < 300, "the first call never answered");
      await sleep(50);
    }
    await sleep(300);
    await client.close().catch(() => {});
    await gateway.kill();

    // The upstream takes 1.5 s to start; the wait comes at once.
    gateway = await startHttpGateway(durableConfig(dir, "restarted", { timeoutMs: 8000, log, startMs: 1500 }), { args: store });
    client = await connectHttp(gateway.url, auth);
    const resumed = await wait(client.client, started.runId);
    assert.equal(resumed.status, "completed", JSON.stringify(resumed));
    assert.deepEqual(resumed.value, ["slept first", "slept after"]);
    await client.close();
    await gateway.stop();
  });
});

describe("an approval outlives the gateway", () => {
  test("a call held when the gateway is SIGKILLed is listed and approved on the next one, and runs once", async () => {
    const dir = mkdtempSync(join(tmpdir(), "codemode-durable-"));
    const log = join(dir, "calls.log");
    const config = durableConfig(dir, "gateway", { timeoutMs: 8000, log, approve: true });
    const args = ["--store", `file:${join(dir, "runs.db")}`, ...operator.args];
    let gateway = await startHttpGateway(config, { args, env: operator.env });
    let client = await connectHttp(gateway.url, auth);
    const started = await exec(client.client, `
      try { return (await MCP.held.sleep({ ms: 1, tag: "held" })).content[0].text; }
      catch (e) { return e.code + ": " + e.message; }`);
    assert.equal(started.status, "waiting", JSON.stringify(started));
    assert.equal(started.reason, "approval", JSON.stringify(started));
    const callId = started.pendingToolCalls[0].id;
    assert.deepEqual(await held(gateway, started.runId), [callId]);
    await client.close().catch(() => {});
    await gateway.kill();

    gateway = await startHttpGateway(config, { args, env: operator.env });
    // Listed from the store before anyone resumed the run.
    assert.deepEqual(await held(gateway, started.runId), [callId]);
    await approvals(gateway, "approve", started.runId, callId);
    client = await connectHttp(gateway.url, auth);
    const resumed = await wait(client.client, started.runId);
    assert.equal(resumed.status, "completed", JSON.stringify(resumed));
    assert.equal(resumed.value, "slept held");
    assert.deepEqual(calls(log), ["start held"]);
    assert.deepEqual(await held(gateway, started.runId), []);
    await client.close();
    await gateway.stop();
  });
});

describe("stdio gateways of one user share the default store", () => {
  test("another window's gateway resumes a waiting run, and the next gateway a SIGKILLed one's", async () => {
    const dir = mkdtempSync(join(tmpdir(), "codemode-local-"));
    const log = join(dir, "calls.log");
    const config = join(dir, "gateway.json");
    writeFileSync(config, JSON.stringify({
      tools: { codeMode: { enabled: true, timeoutMs: 800 } },
      mcpServers: { slow: { command: process.execPath, args: [join(here, "servers/slow.mjs")], env: { SLOW_LOG: log } } },
    }));
    // The default store (no --store): runs.db in this data directory.
    const env = { CODEMODE_DATA_DIR: join(dir, "data") };
    const first = await connectStdio(config, { env });
    const second = await connectStdio(config, { env });
    const started = await exec(first.client, `
      const a = (await MCP.slow.sleep({ ms: 1500, tag: "window" })).content[0].text;
      return [a, (await MCP.slow.sleep({ ms: 1, tag: "then" })).content[0].text];`);
    assert.equal(started.status, "waiting", JSON.stringify(started));
    // The other window's gateway follows the call still running in the
    // first through the store, and runs the rest.
    let resumed = await wait(second.client, started.runId);
    for (let i = 0; resumed.status === "waiting" && i < 20; i++) resumed = await wait(second.client, started.runId);
    assert.equal(resumed.status, "completed", JSON.stringify(resumed));
    assert.deepEqual(resumed.value, ["slept window", "slept then"]);

    const doomed = await exec(first.client, `
      return await MCP.slow.sleep({ ms: 600000, tag: "doomed" }).then((r) => r.content[0].text, (e) => e.code);`);
    assert.equal(doomed.status, "waiting", JSON.stringify(doomed));
    process.kill(first.pid, "SIGKILL");
    await first.close().catch(() => {});
    const next = await connectStdio(config, { env });
    const after = await wait(next.client, doomed.runId);
    assert.equal(after.status, "completed", JSON.stringify(after));
    assert.equal(after.value, "interrupted");
    assert.deepEqual(calls(log), ["start doomed", "start then", "start window"]);
    // One file for every gateway of the data directory, owner-only.
    assert.ok(existsSync(join(dir, "data", "runs.db")));
    assert.ok(!existsSync(join(dir, "data", "runs-2.db")));
    await second.close();
    await next.close();
  });

  test("a call held when a gateway is SIGKILLed is asked again of the client of the next one, and runs once", async () => {
    const dir = mkdtempSync(join(tmpdir(), "codemode-local-"));
    const log = join(dir, "calls.log");
    const config = join(dir, "gateway.json");
    writeFileSync(config, JSON.stringify({
      tools: { codeMode: { enabled: true, timeoutMs: 1500 } },
      mcpServers: {
        held: { command: process.execPath, args: [join(here, "servers/slow.mjs")], env: { SLOW_LOG: log }, approveTools: ["sleep"] },
      },
    }));
    const env = { CODEMODE_DATA_DIR: join(dir, "data") };
    // The first client is asked and never answers.
    const first = await connectStdio(config, { env, onElicit: () => new Promise(() => {}) });
    const started = await exec(first.client, `return (await MCP.held.sleep({ ms: 1, tag: "again" })).content[0].text;`);
    assert.equal(started.status, "waiting", JSON.stringify(started));
    assert.equal(started.reason, "approval", JSON.stringify(started));
    process.kill(first.pid, "SIGKILL");
    await first.close().catch(() => {});
    const asked = [];
    const next = await connectStdio(config, {
      env,
      onElicit: async (params) => {
        asked.push(params.message);
        return { action: "accept", content: { decision: "allow_once" } };
      },
    });
    let resumed = await wait(next.client, started.runId);
    for (let i = 0; resumed.status === "waiting" && i < 10; i++) resumed = await wait(next.client, started.runId);
    assert.equal(resumed.status, "completed", JSON.stringify(resumed));
    assert.equal(resumed.value, "slept again");
    assert.equal(asked.length, 1, "the reconnected client was asked once");
    assert.match(asked[0], /"sleep" of MCP server "held"/);
    assert.deepEqual(calls(log), ["start again"]);
    await next.close();
  });
});

describe("two gateways on one Redis", () => {
  let redis, dir, log, first, second, a, b;

  before(async () => {
    redis = await startRedis();
    dir = mkdtempSync(join(tmpdir(), "codemode-replicas-"));
    log = join(dir, "calls.log");
    const store = ["--store", redis.url];
    first = await startHttpGateway(durableConfig(dir, "first", { timeoutMs: 800, log, approve: true }), { args: store });
    second = await startHttpGateway(durableConfig(dir, "second", { timeoutMs: 15000, log, approve: true }), {
      args: [...store, ...operator.args], env: operator.env,
    });
    a = await connectHttp(first.url, auth);
    b = await connectHttp(second.url, auth);
  });
  after(async () => {
    await a?.close().catch(() => {});
    await b?.close().catch(() => {});
    await first?.stop().catch(() => {});
    await second?.stop();
    await redis?.stop();
  });

  test("exec on one, wait on the other: the call still running on the first is delivered on the second", async () => {
    const started = await exec(a.client, `return (await MCP.slow.sleep({ ms: 2500, tag: "shared" })).content[0].text;`);
    assert.equal(started.status, "waiting", JSON.stringify(started));
    const resumed = await wait(b.client, started.runId);
    assert.equal(resumed.status, "completed", JSON.stringify(resumed));
    assert.equal(resumed.value, "slept shared");
    assert.deepEqual(calls(log).filter((l) => l.endsWith("shared")), ["start shared"]);
  });

  test("SIGKILL of the first mid-call gives interrupted on the second", async () => {
    const started = await exec(a.client, `
      try { return (await MCP.slow.sleep({ ms: 600000, tag: "doomed" })).content[0].text; }
      catch (e) { return e.code; }`);
    assert.equal(started.status, "waiting", JSON.stringify(started));
    const resumed = wait(b.client, started.runId);
    await sleep(500);
    await a.close().catch(() => {});
    await first.kill();
    const result = await resumed;
    assert.equal(result.status, "completed", JSON.stringify(result));
    assert.equal(result.value, "interrupted");
    assert.deepEqual(calls(log).filter((l) => l.endsWith("doomed")), ["start doomed"]);
  });

  test("a call held on the first is listed and approved through the second's operator endpoint, and runs on the first", async () => {
    // The first was killed above: a fresh one holds the call (with an
    // operator endpoint of its own, so it holds the call for an operator).
    const holder = await startHttpGateway(durableConfig(dir, "holder", { timeoutMs: 800, log, approve: true }), {
      args: ["--store", redis.url, ...operator.args], env: operator.env,
    });
    const h = await connectHttp(holder.url, auth);
    try {
      const started = await exec(h.client, `return (await MCP.held.sleep({ ms: 1, tag: "replica" })).content[0].text;`);
      assert.equal(started.reason, "approval", JSON.stringify(started));
      const callId = started.pendingToolCalls[0].id;
      assert.deepEqual(await held(second, started.runId), [callId]);
      await approvals(second, "approve", started.runId, callId);
      let done = await wait(h.client, started.runId);
      for (let i = 0; done.status === "waiting" && i < 10; i++) done = await wait(h.client, started.runId);
      assert.equal(done.status, "completed", JSON.stringify(done));
      assert.equal(done.value, "slept replica");
      assert.deepEqual(calls(log).filter((l) => l.endsWith("replica")), ["start replica"]);
    } finally {
      await h.close().catch(() => {});
      await holder.stop();
    }
  });
});
