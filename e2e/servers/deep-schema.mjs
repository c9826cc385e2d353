// A real MCP server (official TypeScript SDK, stdio) listing one tool whose
// inputSchema nests 100 objects deep (over 200 JSON levels, past what an
// MCP SDK reads in one message) beside two ordinary ones:
//   shallow()   answers "shallow"
//   deep(...)   the over-deep schema
//   fine()      answers "fine"
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

let schema = { type: "string" };
for (let i = 0; i < 100; i++) schema = { type: "object", properties: { a: schema } };

const server = new Server({ name: "deep-schema", version: "1.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: [
    { name: "shallow", description: "Answers shallow", inputSchema: { type: "object" }, annotations: { readOnlyHint: true } },
    { name: "deep", description: "Nests too deeply", inputSchema: { type: "object", properties: { a: schema } } },
    { name: "fine", description: "Answers fine", inputSchema: { type: "object" }, annotations: { readOnlyHint: true } },
  ],
}));
server.setRequestHandler(CallToolRequestSchema, async (request) => ({
  content: [{ type: "text", text: request.params.name }],
}));
await server.connect(new StdioServerTransport());
