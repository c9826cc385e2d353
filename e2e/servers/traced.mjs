// A streamable-HTTP MCP server (official SDK, stateless) whose one tool
// reports the trace context its own call arrived with, for the traces
// test: `seen()` → { header: the `traceparent` HTTP header, meta:
// `_meta.traceparent` }. Prints `listening <URL>` once it listens.
import { createServer } from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";

const http = createServer(async (req, res) => {
  const server = new McpServer({ name: "traced", version: "1.0.0" });
  const header = req.headers.traceparent ?? null;
  server.registerTool("seen", { description: "The trace context of this call", annotations: { readOnlyHint: true } },
    async (extra) => ({
      content: [{ type: "text", text: JSON.stringify({ header, meta: extra?._meta?.traceparent ?? null }) }],
    }));
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on("close", () => { transport.close(); server.close(); });
  await server.connect(transport);
  let body = "";
  for await (const chunk of req) body += chunk;
  return transport.handleRequest(req, res, req.method === "POST" ? JSON.parse(body || "null") : undefined);
});

http.listen(0, "127.0.0.1", () => {
  process.stdout.write(`listening http://127.0.0.1:${http.address().port}/mcp\n`);
});
