// An MCP server behind OAuth, for the upstream-OAuth tests: one process
// that is both the authorization server (RFC 8414 metadata; dynamic client
// registration; an authorization endpoint that approves at once, as a
// user who clicks "allow" would; a token endpoint for the
// client-credentials, authorization-code (PKCE S256 checked) and
// refresh-token grants) and the protected resource (RFC 9728 metadata; the
// official SDK's streamable HTTP transport behind a bearer check). Prints
// `listening <base URL>` once it listens.
//   whoami()     the client id the presented token was issued to
//   calls()      how many tools/call requests carried a valid token
//   issued()     how many tokens the token endpoint issued
//   refreshes()  { count, resources, scopes } of refresh-token grants
//   write_note() needs the scope `mcp:write` on the token: without it the
//                request gets 403 `insufficient_scope` (RFC 6750 §3.1)
// Tokens live TOKEN_TTL_SECONDS (default 3600). The pre-registered client
// `deny-me` is refused: its redirect carries error=access_denied.
import { createServer } from "node:http";
import { createHash, randomBytes } from "node:crypto";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";

const CLIENTS = { gateway: "right-secret-0123456789" };
const tokens = new Map(); // token -> { client, expires, scopes }
const TTL = Number(process.env.TOKEN_TTL_SECONDS ?? 3600);
// Public clients: pre-registered, and those registered dynamically.
const publicClients = new Map([["cli-app", { redirect_uris: null }], ["deny-me", { redirect_uris: null }]]);
const codes = new Map(); // code -> { client, redirect, challenge, resource, scope }
const refreshTokens = new Map(); // refresh token -> { client, scope }
const refreshes = { count: 0, resources: [], scopes: [] };
let calls = 0;
let base;

function json(res, status, body, headers = {}) {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

async function readBody(req) {
  let body = "";
  for await (const chunk of req) body += chunk;
  return body;
}

const http = createServer(async (req, res) => {
  const url = new URL(req.url, base);
  if (url.pathname === "/.well-known/oauth-authorization-server") {
    return json(res, 200, {
      issuer: base,
      token_endpoint: `${base}/token`,
      authorization_endpoint: `${base}/authorize`,
      response_types_supported: ["code"],
      registration_endpoint: `${base}/register`,
      grant_types_supported: ["client_credentials", "authorization_code", "refresh_token"],
      code_challenge_methods_supported: ["S256"],
      scopes_supported: ["mcp:read", "mcp:write"],
      token_endpoint_auth_methods_supported: ["client_secret_post", "client_secret_basic", "none"],
    });
  }
  if (url.pathname === "/register" && req.method === "POST") {
    const meta = JSON.parse((await readBody(req)) || "{}");
    if (!Array.isArray(meta.redirect_uris) || meta.redirect_uris.length === 0) {
      return json(res, 400, { error: "invalid_redirect_uri" });
    }
    const client_id = `dyn-${randomBytes(8).toString("hex")}`;
    publicClients.set(client_id, { redirect_uris: meta.redirect_uris });
    return json(res, 201, { ...meta, client_id, token_endpoint_auth_method: "none" });
  }
  if (url.pathname === "/authorize" && req.method === "GET") {
    const q = url.searchParams;
    const client = publicClients.get(q.get("client_id"));
    const redirect = q.get("redirect_uri") ?? "";
    const loopback = /^http:\/\/(127\.0\.0\.1|localhost)(:\d+)?\//.test(redirect);
    if (!client || !(client.redirect_uris ? client.redirect_uris.includes(redirect) : loopback)) {
      return json(res, 400, { error: "invalid_request", error_description: "unknown client or redirect_uri" });
    }
    if (q.get("response_type") !== "code" || q.get("code_challenge_method") !== "S256" || !q.get("code_challenge")) {
      return json(res, 400, { error: "invalid_request", error_description: "PKCE S256 is required" });
    }
    const back = new URL(redirect);
    back.searchParams.set("state", q.get("state") ?? "");
    if (q.get("client_id") === "deny-me") {
      back.searchParams.set("error", "access_denied");
      back.searchParams.set("error_description", "the user said no");
    } else {
      const code = randomBytes(16).toString("hex");
      codes.set(code, {
        client: q.get("client_id"), redirect, challenge: q.get("code_challenge"),
        resource: q.get("resource"), scope: q.get("scope"),
      });
      back.searchParams.set("code", code);
    }
    res.writeHead(302, { location: back.href });
    return res.end();
  }
  if (url.pathname.startsWith("/.well-known/oauth-protected-resource")) {
    return json(res, 200, { resource: `${base}/mcp`, authorization_servers: [base] });
  }
  if (url.pathname === "/token" && req.method === "POST") {
    const form = new URLSearchParams(await readBody(req));
    let id = form.get("client_id");
    let secret = form.get("client_secret");
    const basic = /^Basic (.+)$/.exec(req.headers.authorization ?? "");
    if (basic) [id, secret] = Buffer.from(basic[1], "base64").toString().split(":").map(decodeURIComponent);
    const issue = (client, extra = {}, scope = form.get("scope")) => {
      const token = randomBytes(24).toString("hex");
      tokens.set(token, { client, expires: Date.now() + TTL * 1000, scopes: (scope ?? "").split(" ").filter(Boolean) });
      return json(res, 200, { access_token: token, token_type: "Bearer", expires_in: TTL, ...extra });
    };
    const withRefresh = (client, scope) => {
      const refresh = randomBytes(24).toString("hex");
      refreshTokens.set(refresh, { client, scope });
      return issue(client, { refresh_token: refresh, ...(scope ? { scope } : {}) }, scope);
    };
    const grant = form.get("grant_type");
    if (grant === "authorization_code") {
      const code = codes.get(form.get("code"));
      codes.delete(form.get("code"));
      const verifier = form.get("code_verifier") ?? "";
      const challenge = createHash("sha256").update(verifier).digest("base64url");
      if (!code || code.client !== id || code.redirect !== form.get("redirect_uri") || code.challenge !== challenge) {
        return json(res, 400, { error: "invalid_grant", error_description: "code, client, redirect_uri or PKCE verifier mismatch" });
      }
      return withRefresh(id, code.scope);
    }
    if (grant === "refresh_token") {
      const old = refreshTokens.get(form.get("refresh_token"));
      if (!old || old.client !== id) return json(res, 400, { error: "invalid_grant" });
      refreshTokens.delete(form.get("refresh_token")); // rotated
      refreshes.count += 1;
      refreshes.resources.push(form.get("resource"));
      refreshes.scopes.push(form.get("scope"));
      return withRefresh(id, old.scope);
    }
    if (grant !== "client_credentials" || !id || CLIENTS[id] !== secret) {
      return json(res, 401, { error: "invalid_client" });
    }
    return issue(id);
  }
  if (url.pathname === "/mcp") {
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
    const grant = token && tokens.get(token);
    if (!grant || grant.expires < Date.now()) {
      return json(res, 401, { error: "invalid_token" }, {
        "www-authenticate": `Bearer resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`,
      });
    }
    const body = req.method === "POST" ? JSON.parse((await readBody(req)) || "null") : undefined;
    if (body?.method === "tools/call" && body.params?.name === "write_note" && !grant.scopes.includes("mcp:write")) {
      return json(res, 403, { error: "insufficient_scope" }, {
        "www-authenticate": `Bearer error="insufficient_scope", scope="mcp:write", resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`,
      });
    }
    // Stateless: a server and transport per request.
    const server = new McpServer({ name: "protected", version: "1.0.0" });
    server.registerTool("whoami", { description: "The client the token was issued to", annotations: { readOnlyHint: true } },
      async () => ({ content: [{ type: "text", text: grant.client }] }));
    server.registerTool("calls", { description: "Authorized tool calls so far", annotations: { readOnlyHint: true } },
      async () => ({ content: [{ type: "text", text: String(calls) }] }));
    server.registerTool("issued", { description: "Tokens issued so far", annotations: { readOnlyHint: true } },
      async () => ({ content: [{ type: "text", text: String(tokens.size) }] }));
    server.registerTool("refreshes", { description: "Refresh-token grants so far", annotations: { readOnlyHint: true } },
      async () => ({ content: [{ type: "text", text: JSON.stringify(refreshes) }] }));
    server.registerTool("write_note", {
      description: "Needs the scope mcp:write",
      annotations: { readOnlyHint: false, destructiveHint: false },
    }, async () => ({ content: [{ type: "text", text: `written by ${grant.client} with ${grant.scopes.join(" ")}` }] }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on("close", () => { transport.close(); server.close(); });
    await server.connect(transport);
    if (body?.method === "tools/call") calls += 1;
    return transport.handleRequest(req, res, body);
  }
  json(res, 404, { error: "not found" });
});

http.listen(0, "127.0.0.1", () => {
  base = `http://127.0.0.1:${http.address().port}`;
  process.stdout.write(`listening ${base}\n`);
});
