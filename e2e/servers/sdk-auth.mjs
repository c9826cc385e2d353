// An MCP server behind OAuth built from the official SDK's server-side
// auth pieces: `mcpAuthRouter` as the authorization server (RFC 8414
// metadata, dynamic client registration, the authorization endpoint, the
// token endpoint with its own PKCE check) around the SDK's demo in-memory
// provider, `requireBearerAuth` in front of a streamable-HTTP MCP server,
// and the RFC 9728 metadata the router serves. The provider is the demo's
// plus refresh tokens (rotated) and a short token lifetime
// (TOKEN_TTL_SECONDS, default 4). The demo "user" approves at once, as a
// browser's "allow" would. Prints `listening <MCP URL>` once it listens.
//   whoami()     the client id of the token the call carried
//   refreshes()  [{ resource }] of each refresh-token grant
import { randomUUID } from "node:crypto";
import express from "express";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { mcpAuthRouter, getOAuthProtectedResourceMetadataUrl } from "@modelcontextprotocol/sdk/server/auth/router.js";
import { requireBearerAuth } from "@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js";
import { InvalidGrantError } from "@modelcontextprotocol/sdk/server/auth/errors.js";
import { DemoInMemoryAuthProvider } from "@modelcontextprotocol/sdk/examples/server/demoInMemoryOAuthProvider.js";

const TTL = Number(process.env.TOKEN_TTL_SECONDS ?? 4);

class Provider extends DemoInMemoryAuthProvider {
  constructor(resource) {
    super((r) => r?.toString() === resource);
    this.refreshTokens = new Map();
    this.refreshes = [];
  }

  issue(clientId, scopes, resource) {
    const token = randomUUID();
    this.tokens.set(token, { token, clientId, scopes, resource, expiresAt: Date.now() + TTL * 1000, type: "access" });
    const refresh = randomUUID();
    this.refreshTokens.set(refresh, { clientId, scopes, resource });
    return { access_token: token, token_type: "bearer", expires_in: TTL, refresh_token: refresh, scope: scopes.join(" ") };
  }

  async exchangeAuthorizationCode(client, code, verifier, redirectUri, resource) {
    const granted = await super.exchangeAuthorizationCode(client, code, verifier, redirectUri, resource);
    const data = this.tokens.get(granted.access_token);
    this.tokens.delete(granted.access_token);
    return this.issue(client.client_id, data.scopes, data.resource);
  }

  async exchangeRefreshToken(client, refreshToken, _scopes, resource) {
    const old = this.refreshTokens.get(refreshToken);
    if (!old || old.clientId !== client.client_id) throw new InvalidGrantError("unknown refresh token");
    this.refreshTokens.delete(refreshToken);
    this.refreshes.push({ resource: resource?.toString() ?? null });
    return this.issue(client.client_id, old.scopes, old.resource);
  }
}

const app = express();
const listener = app.listen(0, "127.0.0.1", () => {
  const base = new URL(`http://127.0.0.1:${listener.address().port}/`);
  const mcpUrl = new URL("/mcp", base);
  const provider = new Provider(mcpUrl.href);
  app.use(mcpAuthRouter({ provider, issuerUrl: base, resourceServerUrl: mcpUrl, scopesSupported: ["mcp:tools"] }));
  const bearer = requireBearerAuth({ verifier: provider, resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(mcpUrl) });
  app.post("/mcp", express.json(), bearer, async (req, res) => {
    const server = new McpServer({ name: "sdk-auth", version: "1.0.0" });
    server.registerTool("whoami", { description: "The client the token was issued to", annotations: { readOnlyHint: true } },
      async (extra) => ({ content: [{ type: "text", text: extra.authInfo?.clientId ?? "nobody" }] }));
    server.registerTool("refreshes", { description: "Refresh-token grants so far", annotations: { readOnlyHint: true } },
      async () => ({ content: [{ type: "text", text: JSON.stringify(provider.refreshes) }] }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on("close", () => { transport.close(); server.close(); });
    await server.connect(transport);
    await transport.handleRequest(req, res, req.body);
  });
  process.stdout.write(`listening ${mcpUrl.href}\n`);
});
