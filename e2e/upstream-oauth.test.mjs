// End-to-end: an HTTP upstream behind OAuth (`servers/protected.mjs`, the
// official SDK's server behind a bearer check, with its own authorization
// server). The gateway gets a token by the client-credentials grant,
// found through the upstream's metadata; wrong credentials leave the
// server down with a reason that never shows the secret. A user's
// authorization comes from `codemode login` (authorization code + PKCE,
// dynamic registration or a pre-registered client), with the browser step
// scripted: the test follows the authorization URL's redirect back to the
// login's loopback listener, as a browser would after "allow".
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, statSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { BIN, connectStdio, exec, startListening } from "./harness.mjs";

const run = promisify(execFile);

function writeGateway(oauth) {
  const dir = mkdtempSync(join(tmpdir(), "codemode-upstream-oauth-"));
  const path = join(dir, "gateway.json");
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs: 5000 } },
    mcpServers: { secure: oauth },
  }));
  return path;
}

function config(base, secretRef) {
  return writeGateway({ url: `${base}/mcp`, oauth: { clientCredentials: { clientId: "gateway", clientSecret: secretRef } } });
}

/** Starts `servers/protected.mjs` (or `script`); tokens live 4 s, so the
 * gateway must get new ones before they expire. Returns { upstream, base }
 * (`base`: what the server printed). */
async function startProtected(script = "protected.mjs") {
  const { child: upstream, url: base } = await startListening(script, { TOKEN_TTL_SECONDS: "4" });
  return { upstream, base };
}

/** Runs `codemode login secure`, playing the browser: fetches the printed
 * authorization URL without following its redirect, then delivers the
 * redirect to the login's listener. Returns { code, stderr, page }. */
async function login(configPath, env) {
  const child = spawn(BIN, ["login", "secure", "--config", configPath, "--no-browser", "--timeout", "20"], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  let stdout = "";
  child.stdout.on("data", (c) => { stdout += c; });
  const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  const authorizationUrl = await new Promise((resolve, reject) => {
    child.stderr.on("data", (c) => {
      stderr += c;
      const m = /^(http\S+\/authorize\?\S+)$/m.exec(stderr);
      if (m) resolve(m[1]);
    });
    exited.then((code) => reject(new Error(`login exited with ${code} before printing a URL:\n${stderr}`)));
  });
  const authorize = await fetch(authorizationUrl, { redirect: "manual" });
  assert.equal(authorize.status, 302, await authorize.text());
  const back = authorize.headers.get("location");
  assert.match(back, /^http:\/\/127\.0\.0\.1:\d+\/callback\?/, "the redirect goes to loopback");
  const page = await (await fetch(back)).text();
  const code = await exited;
  return { code, stderr, stdout, page, authorizationUrl: new URL(authorizationUrl) };
}

function tokenFile(dataDir) {
  return join(dataDir, "oauth", "secure.json");
}

describe("OAuth client credentials to an upstream", () => {
  let upstream, base, client;

  before(async () => {
    ({ upstream, base } = await startProtected());
  });

  after(async () => {
    await client?.close();
    upstream?.kill();
  });

  test("the gateway gets a token and calls the protected tools", async () => {
    process.env.SECURE_SECRET = "right-secret-0123456789";
    ({ client } = await connectStdio(config(base, "${SECURE_SECRET}")));
    const r = await exec(client, `
      const who = (await MCP.secure.whoami({})).content[0].text;
      const n = (await MCP.secure.calls({})).content[0].text;
      return { who, n: Number(n) };`);
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.equal(r.value.who, "gateway");
    assert.ok(r.value.n >= 2, JSON.stringify(r));
  });

  test("a new token is got before the old one expires", async () => {
    await new Promise((resolve) => setTimeout(resolve, 5000));
    const r = await exec(client, `
      const who = (await MCP.secure.whoami({})).content[0].text;
      const issued = Number((await MCP.secure.issued({})).content[0].text);
      return { who, issued };`);
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.equal(r.value.who, "gateway", "still authorized after the first token expired");
    assert.ok(r.value.issued >= 2, JSON.stringify(r));
  });

  test("a call refused for lack of scope gets a token with that scope and runs once more; other calls and the connection are untouched", async () => {
    const r = await exec(client, `
      const issued = Number((await MCP.secure.issued({})).content[0].text);
      const [note, ...others] = await Promise.all([
        MCP.secure.writeNote({}),
        ...Array.from({ length: 5 }, () => MCP.secure.whoami({})),
      ]);
      const after = Number((await MCP.secure.issued({})).content[0].text);
      return { note: note.content[0].text, others: others.map((o) => o.content[0].text), issued, after };`);
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.equal(r.value.note, "written by gateway with mcp:write", "retried with the widened token");
    assert.deepEqual(r.value.others, Array(5).fill("gateway"), "the calls beside it ran");
    assert.ok(r.value.after > r.value.issued, JSON.stringify(r.value));
    // Same connection: the next cell needs no new start, and the wider
    // token stays (no second refusal, no new token for the write).
    const again = await exec(client, `return (await MCP.secure.writeNote({})).content[0].text;`);
    assert.equal(again.status, "completed", JSON.stringify(again));
    assert.equal(again.value, "written by gateway with mcp:write");
  });

  test("wrong credentials leave the server down with a reason, never the secret", async () => {
    process.env.SECURE_SECRET = "wrong-secret-0123456789";
    // A down server makes `catalog` exit 1 (execFile rejects with the output).
    const out = await run(BIN, ["catalog", "--config", config(base, "${SECURE_SECRET}")], { env: process.env }).catch((e) => e);
    assert.equal(out.code, 1);
    assert.doesNotMatch(out.stdout, /secure/, "no tools of the down server");
    assert.match(out.stderr, /MCP server `secure`: OAuth client credentials: getting an access token failed/);
    assert.doesNotMatch(out.stderr + out.stdout, /wrong-secret/);
  });
});

describe("codemode login: a user's authorization of an upstream", () => {
  let upstream, base, client;
  const dataDir = mkdtempSync(join(tmpdir(), "codemode-data-"));
  const env = { CODEMODE_DATA_DIR: dataDir };

  before(async () => {
    ({ upstream, base } = await startProtected());
  });

  after(async () => {
    await client?.close();
    upstream?.kill();
  });

  test("before a login the server is down with a reason that says to log in", async () => {
    const path = writeGateway({ url: `${base}/mcp`, oauth: { authorizationCode: { scopes: ["mcp:read"] } } });
    const out = await run(BIN, ["catalog", "--config", path], { env: { ...process.env, ...env } }).catch((e) => e);
    assert.equal(out.code, 1, "a server that is down fails the catalog");
    assert.doesNotMatch(out.stdout, /secure/);
    assert.match(out.stderr, /MCP server `secure`: not logged in .*run `codemode login secure --config/);
  });

  test("login registers a client, runs authorization code with PKCE and stores the token owner-only", async () => {
    const path = writeGateway({ url: `${base}/mcp`, oauth: { authorizationCode: { scopes: ["mcp:read"] } } });
    const r = await login(path, env);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.page, /authorization received/);
    assert.match(r.stderr, /logged in to `secure` \(client dyn-[0-9a-f]+\); token stored in /);
    const q = r.authorizationUrl.searchParams;
    assert.equal(q.get("code_challenge_method"), "S256");
    assert.equal(q.get("resource"), `${base}/mcp`, "RFC 8707 resource on the authorization request");
    assert.equal(q.get("scope"), "mcp:read");
    const file = tokenFile(dataDir);
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.equal(statSync(join(dataDir, "oauth")).mode & 0o777, 0o700);
    const stored = JSON.parse(readFileSync(file, "utf8"));
    const { access_token, refresh_token } = stored.credentials.token_response;
    assert.ok(access_token && refresh_token, "both tokens stored");
    for (const secret of [access_token, refresh_token]) {
      assert.ok(!(r.stderr + r.stdout).includes(secret), "no token is printed");
    }
  });

  test("the gateway uses the stored token and refreshes it (resource kept) before it expires", async () => {
    const path = writeGateway({ url: `${base}/mcp`, oauth: { authorizationCode: { scopes: ["mcp:read"] } } });
    const first = JSON.parse(readFileSync(tokenFile(dataDir), "utf8")).credentials.token_response.access_token;
    process.env.CODEMODE_DATA_DIR = dataDir;
    try {
      ({ client } = await connectStdio(path));
    } finally {
      delete process.env.CODEMODE_DATA_DIR;
    }
    const who = await exec(client, `return (await MCP.secure.whoami({})).content[0].text;`);
    assert.equal(who.status, "completed", JSON.stringify(who));
    assert.match(who.value, /^dyn-/);
    // Tokens live 4 s; the one from the login is older than that by now
    // or soon: calls keep working across its expiry.
    await new Promise((resolve) => setTimeout(resolve, 5000));
    const r = await exec(client, `
      const who = (await MCP.secure.whoami({})).content[0].text;
      const refreshes = JSON.parse((await MCP.secure.refreshes({})).content[0].text);
      return { who, refreshes };`);
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.equal(r.value.who, who.value, "still authorized as the same client");
    assert.ok(r.value.refreshes.count >= 1, JSON.stringify(r.value));
    for (const resource of r.value.refreshes.resources) assert.equal(resource, `${base}/mcp`);
    for (const scope of r.value.refreshes.scopes) assert.ok(scope === null || scope === "mcp:read", scope);
    const now = JSON.parse(readFileSync(tokenFile(dataDir), "utf8")).credentials.token_response.access_token;
    assert.notEqual(now, first, "the refreshed token was written back to the token file");
  });

  test("a call the stored login lacks the scope for fails alone, saying to log in again, which then asks for both scopes", async () => {
    const path = writeGateway({ url: `${base}/mcp`, oauth: { authorizationCode: { scopes: ["mcp:read"] } } });
    const r = await exec(client, `
      let refused;
      try { await MCP.secure.writeNote({}); } catch (e) { refused = e.message; }
      const who = (await MCP.secure.whoami({})).content[0].text;
      return { refused, who };`);
    assert.equal(r.status, "completed", JSON.stringify(r));
    assert.match(r.value.refused, /MCP server `secure` needs scope `mcp:write` for this call, which the stored login lacks; run `codemode login secure --config <this config>` again/);
    assert.doesNotMatch(r.value.refused, /restart|crashed/);
    assert.match(r.value.who, /^dyn-/, "the connection still serves the other tools");
    assert.deepEqual(JSON.parse(readFileSync(tokenFile(dataDir), "utf8")).wanted_scopes, ["mcp:write"]);
    const again = await login(path, env);
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.authorizationUrl.searchParams.get("scope"), "mcp:read mcp:write", "what it had plus what it lacked");
    assert.equal(JSON.parse(readFileSync(tokenFile(dataDir), "utf8")).wanted_scopes, undefined, "asked for: forgotten");
    // The running gateway picks the new login up.
    const note = await exec(client, `return (await MCP.secure.writeNote({})).content[0].text;`);
    assert.equal(note.status, "completed", JSON.stringify(note));
    assert.match(note.value, /^written by dyn-\S+ with mcp:read mcp:write$/);
  });

  test("a pre-registered client logs in with its own id; logout removes the token", async () => {
    const data = mkdtempSync(join(tmpdir(), "codemode-data-"));
    const path = writeGateway({ url: `${base}/mcp`, oauth: { authorizationCode: { clientId: "cli-app" } } });
    const r = await login(path, { CODEMODE_DATA_DIR: data });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /logged in to `secure` \(client cli-app\)/);
    const out = await run(BIN, ["catalog", "--config", path], { env: { ...process.env, CODEMODE_DATA_DIR: data } });
    assert.match(out.stdout, /"call":"MCP\.secure\.whoami"/);
    const gone = await run(BIN, ["logout", "secure", "--config", path], { env: { ...process.env, CODEMODE_DATA_DIR: data } });
    assert.match(gone.stderr, /removed the stored token of `secure`/);
    assert.ok(!existsSync(tokenFile(data)));
  });

  test("a refused authorization fails the login with the server's reason and stores nothing", async () => {
    const data = mkdtempSync(join(tmpdir(), "codemode-data-"));
    const path = writeGateway({ url: `${base}/mcp`, oauth: { authorizationCode: { clientId: "deny-me" } } });
    const r = await login(path, { CODEMODE_DATA_DIR: data });
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /the authorization server refused: access_denied \(the user said no\)/);
    assert.match(r.page, /the login failed/);
    assert.ok(!existsSync(tokenFile(data)));
  });
});

describe("codemode login against the official SDK's authorization server", () => {
  let upstream, url, client;
  const dataDir = mkdtempSync(join(tmpdir(), "codemode-data-"));

  before(async () => {
    ({ upstream, base: url } = await startProtected("sdk-auth.mjs"));
  });

  after(async () => {
    await client?.close();
    upstream?.kill();
  });

  test("registration, PKCE and refresh work with mcpAuthRouter and requireBearerAuth", async () => {
    const path = writeGateway({ url, oauth: { authorizationCode: {} } });
    const r = await login(path, { CODEMODE_DATA_DIR: dataDir });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.page, /authorization received/);
    assert.equal(r.authorizationUrl.searchParams.get("scope"), "mcp:tools", "the advertised scope by default");
    process.env.CODEMODE_DATA_DIR = dataDir;
    try {
      ({ client } = await connectStdio(path));
    } finally {
      delete process.env.CODEMODE_DATA_DIR;
    }
    const first = await exec(client, `return (await MCP.secure.whoami({})).content[0].text;`);
    assert.equal(first.status, "completed", JSON.stringify(first));
    assert.match(r.stderr, new RegExp(`\\(client ${first.value}\\)`), "the registered client calls");
    await new Promise((resolve) => setTimeout(resolve, 5000));
    const later = await exec(client, `
      return { who: (await MCP.secure.whoami({})).content[0].text,
               refreshes: JSON.parse((await MCP.secure.refreshes({})).content[0].text) };`);
    assert.equal(later.status, "completed", JSON.stringify(later));
    assert.equal(later.value.who, first.value);
    assert.ok(later.value.refreshes.length >= 1, JSON.stringify(later.value));
    for (const { resource } of later.value.refreshes) assert.equal(resource, url);
  });
});
