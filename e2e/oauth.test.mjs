// End-to-end: the gateway as an OAuth 2.1 protected resource. The test is
// its own authorization server on loopback: it generates RSA keys,
// publishes them as a JWKS behind RFC 8414 metadata, and signs access
// tokens. The official TypeScript client connects with a valid token;
// expired, wrong-audience and forged tokens get 401 with the challenge
// that points at the resource metadata; after a key rotation, a token
// signed with the new key is accepted (the gateway fetches the keys again).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { generateKeyPairSync, sign } from "node:crypto";
import { createServer } from "node:http";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectHttp, exec, servers, startHttpGateway } from "./harness.mjs";

const RESOURCE = "https://codemode.test/mcp";
const b64url = (data) => Buffer.from(data).toString("base64url");

function newKey(kid) {
  const { publicKey, privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  return { kid, privateKey, jwk: { ...publicKey.export({ format: "jwk" }), kid, alg: "RS256", use: "sig" } };
}

function token(key, claims) {
  const header = b64url(JSON.stringify({ alg: "RS256", typ: "JWT", kid: key.kid }));
  const payload = b64url(JSON.stringify(claims));
  const signature = sign("sha256", Buffer.from(`${header}.${payload}`), key.privateKey).toString("base64url");
  return `${header}.${payload}.${signature}`;
}

describe("OAuth access tokens", () => {
  let issuerServer, issuer, gateway, client;
  let published;
  const key1 = newKey("k1");
  const key2 = newKey("k2");
  const now = () => Math.floor(Date.now() / 1000);
  const claims = (extra = {}) => ({ iss: issuer, aud: RESOURCE, sub: "alice", iat: now(), exp: now() + 300, ...extra });
  let firstFetch;

  before(async () => {
    published = [key1.jwk];
    issuerServer = createServer((req, res) => {
      res.setHeader("content-type", "application/json");
      if (req.url === "/.well-known/oauth-authorization-server") {
        res.end(JSON.stringify({ issuer, jwks_uri: `${issuer}/jwks`, authorization_endpoint: `${issuer}/authorize`, token_endpoint: `${issuer}/token` }));
      } else if (req.url === "/jwks") {
        firstFetch ??= Date.now();
        res.end(JSON.stringify({ keys: published }));
      } else {
        res.statusCode = 404;
        res.end("{}");
      }
    });
    await new Promise((resolve) => issuerServer.listen(0, "127.0.0.1", resolve));
    issuer = `http://127.0.0.1:${issuerServer.address().port}`;
    const dir = mkdtempSync(join(tmpdir(), "codemode-oauth-"));
    const config = join(dir, "gateway.json");
    writeFileSync(config, JSON.stringify({
      tools: { codeMode: { enabled: true, timeoutMs: 5000 } },
      auth: { oauth: { issuer, resource: RESOURCE } },
      mcpServers: { annotated: { command: process.execPath, args: [servers.annotated] } },
    }));
    gateway = await startHttpGateway(config);
  });

  after(async () => {
    await client?.close();
    await gateway?.stop();
    issuerServer?.close();
  });

  const attempt = (bearer) => fetch(gateway.url, {
    method: "POST",
    headers: {
      "content-type": "application/json", accept: "application/json, text/event-stream",
      ...(bearer ? { authorization: `Bearer ${bearer}` } : {}),
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } } }),
  });

  test("the resource metadata is public and the challenge points at it", async () => {
    const base = gateway.url.replace(/\/mcp$/, "");
    const meta = await (await fetch(`${base}/.well-known/oauth-protected-resource/mcp`)).json();
    assert.equal(meta.resource, RESOURCE);
    assert.deepEqual(meta.authorization_servers, [issuer]);
    const refused = await attempt(null);
    assert.equal(refused.status, 401);
    assert.equal(
      refused.headers.get("www-authenticate"),
      'Bearer realm="codemode", resource_metadata="https://codemode.test/.well-known/oauth-protected-resource/mcp"',
    );
  });

  test("a valid token lets the official client run cells", async () => {
    client = (await connectHttp(gateway.url, { headers: { Authorization: `Bearer ${token(key1, claims())}` } }));
    const r = await exec(client.client, "return (await MCP.annotated.peek({})).content[0].text");
    assert.equal(r.value, "peeked", JSON.stringify(r));
  });

  for (const [what, makeToken, reason] of [
    ["an expired token", () => token(key1, claims({ iat: now() - 600, exp: now() - 120 })), /expired/],
    ["a token for another resource", () => token(key1, claims({ aud: "https://elsewhere.test/mcp" })), /another resource/],
    ["a token from another issuer", () => token(key1, claims({ iss: "https://evil.test" })), /another issuer/],
    ["a forged token (right kid, wrong key)", () => token({ ...key2, kid: "k1" }, claims()), /signature does not verify/],
    ["a symmetric (HS256) token", () => `${b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }))}.${b64url(JSON.stringify(claims()))}.x`, /not accepted/],
  ]) {
    test(`${what} gets 401 invalid_token with the reason`, async () => {
      const refused = await attempt(makeToken());
      assert.equal(refused.status, 401);
      const challenge = refused.headers.get("www-authenticate");
      assert.match(challenge, /error="invalid_token"/);
      assert.match(challenge, reason);
      assert.match(await refused.text(), reason);
    });
  }

  test("after a key rotation, tokens signed with the new key are accepted", async () => {
    published = [key2.jwk];
    // The gateway fetches keys again for an unknown key id at most every 2 s.
    const wait = Math.max(0, firstFetch + 2100 - Date.now());
    await new Promise((resolve) => setTimeout(resolve, wait));
    const accepted = await attempt(token(key2, claims({ sub: "bob" })));
    assert.equal(accepted.status, 200, await accepted.text());
  });
});
