// End-to-end: an HTTP upstream behind OAuth (`servers/protected.mjs`, the
// official SDK's server behind a bearer check, with its own authorization
// server). The gateway gets a token by the client-credentials grant,
// found through the upstream's metadata; wrong credentials leave the
// server down with a reason that never shows the secret.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { BIN, connectStdio, exec, servers } from "./harness.mjs";

const run = promisify(execFile);

function config(base, secretRef) {
  const dir = mkdtempSync(join(tmpdir(), "codemode-upstream-oauth-"));
  const path = join(dir, "gateway.json");
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs: 5000 } },
    mcpServers: {
      secure: { url: `${base}/mcp`, oauth: { clientCredentials: { clientId: "gateway", clientSecret: secretRef } } },
    },
  }));
  return path;
}

describe("OAuth client credentials to an upstream", () => {
  let upstream, base, client;

  before(async () => {
    // Tokens live 4 s: the gateway must get new ones before they expire.
    upstream = spawn(process.execPath, [join(servers.annotated, "..", "protected.mjs")], {
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, TOKEN_TTL_SECONDS: "4" },
    });
    base = await new Promise((resolve, reject) => {
      let seen = "";
      upstream.stdout.on("data", (c) => {
        seen += c;
        const m = /listening (\S+)\n/.exec(seen);
        if (m) resolve(m[1]);
      });
      upstream.on("exit", (code) => reject(new Error(`the upstream exited with ${code}`)));
    });
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

  test("wrong credentials leave the server down with a reason, never the secret", async () => {
    process.env.SECURE_SECRET = "wrong-secret-0123456789";
    const out = await run(BIN, ["catalog", "--config", config(base, "${SECURE_SECRET}")], { env: process.env });
    assert.doesNotMatch(out.stdout, /secure/, "no tools of the down server");
    assert.match(out.stderr, /MCP server `secure`: OAuth client credentials: getting an access token failed/);
    assert.doesNotMatch(out.stderr + out.stdout, /wrong-secret/);
  });
});
