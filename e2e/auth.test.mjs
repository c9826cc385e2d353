// End-to-end: the gateway on HTTP for a team. Bearer tokens from the
// config (missing, wrong, right), a session bound to the principal that
// opened it, the per-principal limit of running calls, `/metrics` behind
// the same auth and on its own listener (parsed by a Prometheus text
// parser after a scripted session), and the refusal to serve a
// non-loopback address without auth.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { BIN, connectHttp, exec, servers, startHttpGateway, wait } from "./harness.mjs";

const ALICE = "alice-token-0123456789abcdef";
const BOB = "bob-token-0123456789abcdef";

function authConfig(auth) {
  const dir = mkdtempSync(join(tmpdir(), "codemode-auth-"));
  const path = join(dir, "gateway.json");
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs: 5000 } },
    ...(auth ? { auth } : {}),
    mcpServers: { annotated: { command: process.execPath, args: [servers.annotated] } },
  }));
  return path;
}

const initialize = {
  jsonrpc: "2.0", id: 1, method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } },
};

function post(url, body, headers = {}) {
  return fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
    body: JSON.stringify(body),
  });
}

/** The samples named `name` as [{labels, value}]. (The parser reads the
 * classic text format, where a counter's samples form their own family
 * under their `_total` name.) */
function samples(text, name) {
  const family = parsePrometheusTextFormat(text).find((f) => f.name === name);
  return family ? family.metrics.map((m) => ({ labels: m.labels ?? {}, value: Number(m.value ?? m.count) })) : [];
}

describe("bearer tokens", () => {
  let gateway, alice, bob;

  before(async () => {
    gateway = await startHttpGateway(
      authConfig({ bearerTokens: [{ name: "alice", token: ALICE }, { name: "bob", token: BOB }], maxConcurrentExecs: 1, maxSuspendedRuns: 2 }),
      { args: ["--metrics", "127.0.0.1:0"] },
    );
  });
  after(async () => {
    await alice?.close();
    await bob?.close();
    await gateway?.stop();
  });

  test("a request without a token or with a wrong one gets 401 and the Bearer challenge", async () => {
    const none = await post(gateway.url, initialize);
    assert.equal(none.status, 401);
    assert.match(none.headers.get("www-authenticate"), /^Bearer realm="codemode"$/);
    const wrong = await post(gateway.url, initialize, { authorization: `Bearer ${ALICE.slice(0, -1)}x` });
    assert.equal(wrong.status, 401);
    assert.match(wrong.headers.get("www-authenticate"), /error="invalid_token"/);
    assert.match(await wrong.text(), /auth\.bearerTokens/);
    const metrics = await fetch(gateway.url.replace(/\/mcp$/, "/metrics"));
    assert.equal(metrics.status, 401, "/metrics sits behind the same auth");
  });

  test("the official client with a right token runs cells", async () => {
    alice = await connectHttp(gateway.url, { headers: { Authorization: `Bearer ${ALICE}` } });
    const r = await exec(alice.client, "return (await MCP.annotated.peek({})).content[0].text");
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.equal(r.value, "peeked");
  });

  test("a session belongs to the principal that opened it", async () => {
    const sessionId = alice.transport.sessionId;
    assert.ok(sessionId, "the HTTP session has an id");
    const call = { jsonrpc: "2.0", id: 9, method: "tools/call", params: { name: "exec", arguments: { code: "return 1" } } };
    const stolen = await post(gateway.url, call, {
      authorization: `Bearer ${BOB}`, "mcp-session-id": sessionId, "mcp-protocol-version": "2025-06-18",
    });
    assert.equal(stolen.status, 403);
    assert.match(await stolen.text(), /another principal/);
    // Bob's own session works.
    bob = await connectHttp(gateway.url, { headers: { Authorization: `Bearer ${BOB}` } });
    assert.equal((await exec(bob.client, "return 2")).value, 2);
  });

  test("one principal runs at most maxConcurrentExecs calls at once; others are not held up", async () => {
    const long = exec(alice.client, "const t = Date.now(); while (Date.now() - t < 2500) {} return 'long'");
    let refused;
    for (let i = 0; i < 40 && !refused; i++) {
      const r = await exec(alice.client, "return 'short'");
      if (r.status === "failed") refused = r;
      else await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.ok(refused, "a second concurrent call of alice was refused");
    // A made-up tool name is refused before any limit or metric sees it
    // (metrics labels come from a fixed set, whatever a client sends).
    await assert.rejects(
      alice.client.callTool({ name: "bogus_tool_name_label", arguments: {} }),
      /exactly two tools/,
    );
    assert.equal(refused.code, "runtime_busy");
    assert.match(refused.error, /principal `alice` already has 1 exec\/wait calls running \(auth\.maxConcurrentExecs\)/);
    assert.equal((await exec(bob.client, "return 'bob'")).value, "bob", "bob is not limited by alice");
    assert.equal((await long).value, "long");
  });

  test("one principal holds at most maxSuspendedRuns waiting runs over all its sessions", async () => {
    const suspend = (client) => exec(client, "await yield_control(); return 'resumed'");
    const first = await suspend(alice.client);
    assert.equal(first.status, "waiting", JSON.stringify(first));
    // Alice's second session shares her bound.
    const again = await connectHttp(gateway.url, { headers: { Authorization: `Bearer ${ALICE}` } });
    try {
      assert.equal((await suspend(again.client)).status, "waiting");
      const refused = await suspend(again.client);
      assert.equal(refused.status, "failed", JSON.stringify(refused));
      assert.equal(refused.code, "snapshot_limit_exceeded");
      assert.match(refused.error, /`alice` already holds 2 suspended runs over all its sessions/);
      assert.equal((await suspend(bob.client)).status, "waiting", "bob is not limited by alice");
      // Finishing one of hers frees a place.
      assert.equal((await wait(alice.client, first.runId)).value, "resumed");
      assert.equal((await suspend(again.client)).status, "waiting");
    } finally {
      await again.close();
    }
  });

  test("/metrics (with the token, and on its own listener) counts what happened", async () => {
    const behindAuth = await fetch(gateway.url.replace(/\/mcp$/, "/metrics"), { headers: { authorization: `Bearer ${BOB}` } });
    assert.equal(behindAuth.status, 200);
    assert.ok(gateway.metrics, "the gateway printed its metrics address");
    const scraped = await fetch(gateway.metrics);
    assert.match(scraped.headers.get("content-type"), /^application\/openmetrics-text; version=1\.0\.0/);
    const text = await scraped.text();
    assert.match(text, /# EOF\n$/);
    const calls = samples(text, "codemode_calls_total");
    const completed = calls.filter((s) => s.labels.tool === "exec" && s.labels.status === "completed");
    assert.ok(completed.reduce((n, s) => n + s.value, 0) >= 4, text);
    assert.ok(calls.some((s) => s.labels.code === "runtime_busy" && s.value >= 1), text);
    const nested = samples(text, "codemode_nested_calls_total");
    assert.ok(nested.some((s) => s.labels.server === "annotated" && s.labels.outcome === "ok" && s.value >= 1), text);
    assert.deepEqual(samples(text, "codemode_upstream_up").map((s) => [s.labels.server, s.value]), [["annotated", 1]]);
    assert.ok(samples(text, "codemode_sessions")[0].value >= 2, text);
    assert.ok(samples(text, "codemode_auth_failures_total")[0].value >= 4, text);
    assert.doesNotMatch(text, /bogus_tool_name_label/, "no label from a client's tool name");
    const latency = parsePrometheusTextFormat(text).find((f) => f.name === "codemode_call_duration_seconds");
    assert.equal(latency.type, "HISTOGRAM");
  });
});

describe("serving without auth", () => {
  test("is refused on a non-loopback address unless --insecure-no-auth", async () => {
    const config = authConfig(null);
    const refused = await new Promise((resolve) => {
      const child = spawn(BIN, ["serve", "--config", config, "--http", "0.0.0.0:0"], { stdio: ["ignore", "ignore", "pipe"] });
      let err = "";
      child.stderr.on("data", (c) => { err += c; });
      child.on("exit", (code) => resolve({ code, err }));
    });
    assert.equal(refused.code, 2);
    assert.match(refused.err, /refusing to serve MCP on 0\.0\.0\.0:0 without authentication/);
    assert.match(refused.err, /auth\.bearerTokens/);
    const served = await new Promise((resolve, reject) => {
      const child = spawn(BIN, ["serve", "--config", config, "--http", "0.0.0.0:0", "--insecure-no-auth"], {
        stdio: ["ignore", "ignore", "pipe"],
      });
      let err = "";
      child.stderr.on("data", (c) => {
        err += c;
        if (/serving MCP at http:\/\/0\.0\.0\.0:\d+\/mcp\n/.test(err)) {
          child.kill("SIGINT");
          resolve(err);
        }
      });
      child.on("exit", (code) => reject(new Error(`exited ${code} before serving:\n${err}`)));
    });
    assert.match(served, /serving MCP at/);
  });
});
