// An MCP server behind OAuth, for the upstream-OAuth tests: one process
// that is both the authorization server (RFC 8414 metadata and a token
// endpoint for the client-credentials grant) and the protected resource
// (RFC 9728 metadata; the official SDK's streamable HTTP transport behind
// a bearer check). Prints `listening <base URL>` once it listens.
//   whoami()  the client id the presented token was issued to
//   calls()   how many tools/call requests carried a valid token
//   issued()  how many tokens the token endpoint issued
// Tokens live TOKEN_TTL_SECONDS (default 3600).
import { createServer } from "node:http";
import { randomBytes } from "node:crypto";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";

const CLIENTS = { gateway: "right-secret-0123456789" };
const tokens = new Map(); // token -> { client, expires }
const TTL = Number(process.env.TOKEN_TTL_SECONDS ?? 3600);
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
      grant_types_supported: ["client_credentials"],
      token_endpoint_auth_methods_supported: ["client_secret_post", "client_secret_basic"],
    });
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
    if (form.get("grant_type") !== "client_credentials" || !id || CLIENTS[id] !== secret) {
      return json(res, 401, { error: "invalid_client" });
    }
    const token = randomBytes(24).toString("hex");
    tokens.set(token, { client: id, expires: Date.now() + TTL * 1000 });
    return json(res, 200, { access_token: token, token_type: "Bearer", expires_in: TTL });
  }
  if (url.pathname === "/mcp") {
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
    const grant = token && tokens.get(token);
    if (!grant || grant.expires < Date.now()) {
      return json(res, 401, { error: "invalid_token" }, {
        "www-authenticate": `Bearer resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`,
      });
    }
    // Stateless: a server and transport per request.
    const server = new McpServer({ name: "protected", version: "1.0.0" });
    server.registerTool("whoami", { description: "The client the token was issued to" },
      async () => ({ content: [{ type: "text", text: grant.client }] }));
    server.registerTool("calls", { description: "Authorized tool calls so far" },
      async () => ({ content: [{ type: "text", text: String(calls) }] }));
    server.registerTool("issued", { description: "Tokens issued so far" },
      async () => ({ content: [{ type: "text", text: String(tokens.size) }] }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on("close", () => { transport.close(); server.close(); });
    await server.connect(transport);
    const body = req.method === "POST" ? JSON.parse((await readBody(req)) || "null") : undefined;
    if (body?.method === "tools/call") calls += 1;
    return transport.handleRequest(req, res, body);
  }
  json(res, 404, { error: "not found" });
});

http.listen(0, "127.0.0.1", () => {
  base = `http://127.0.0.1:${http.address().port}`;
  process.stdout.write(`listening ${base}\n`);
});
