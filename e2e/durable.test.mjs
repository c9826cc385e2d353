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
//  - two gateways on one real redis-server: exec on the first, wait on the
//    second (the call still running on the first is delivered), and
//    SIGKILL of the first mid-call gives `interrupted` on the second.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, existsSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectHttp, connectStdio, exec, freePort, here, startHttpGateway, wait } from "./harness.mjs";

const ALICE = "alice-token-0123456789abcdef";
const auth = { headers: { authorization: `Bearer ${ALICE}` } };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A gateway config over the slow server, logging its calls to `log`. */
function durableConfig(dir, name, { timeoutMs, log, startMs }) {
  const path = join(dir, `${name}.json`);
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs } },
    auth: { bearerTokens: [{ name: "alice", token: ALICE }] },
    mcpServers: {
      slow: { command: process.execPath, args: [join(here, "servers/slow.mjs")], env: { SLOW_LOG: log, ...(startMs ? { SLOW_START_MS: String(startMs) } : {}) } },
    },
  }));
  return path;
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
});

describe("two gateways on one Redis", () => {
  let redis, dir, log, first, second, a, b;

  before(async () => {
    redis = await startRedis();
    dir = mkdtempSync(join(tmpdir(), "codemode-replicas-"));
    log = join(dir, "calls.log");
    const store = ["--store", redis.url];
    first = await startHttpGateway(durableConfig(dir, "first", { timeoutMs: 800, log }), { args: store });
    second = await startHttpGateway(durableConfig(dir, "second", { timeoutMs: 15000, log }), { args: store });
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
});
