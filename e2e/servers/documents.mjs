// A real MCP server (official TypeScript SDK, stdio) with one tool that
// returns a large document, for the result-handle test:
//   document({ mb })  `mb` MiB of "x" with "NEEDLE" 1 MiB before the end
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "documents", version: "1.0.0" });
server.registerTool("document", {
  description: "A large document",
  inputSchema: { mb: z.number().int().min(1).max(40) },
  annotations: { readOnlyHint: true },
}, async ({ mb }) => {
  const size = mb << 20;
  const at = size - (1 << 20);
  const text = "x".repeat(at) + "NEEDLE" + "x".repeat(size - at - 6);
  return { content: [{ type: "text", text }] };
});
await server.connect(new StdioServerTransport());
