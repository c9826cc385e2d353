// A real MCP server (official TypeScript SDK, stdio) whose tools carry the
// annotations approvals are decided by, for the control-layer tests:
//   peek()            readOnlyHint: true
//   note({ text })    readOnlyHint: false, destructiveHint: false (a write)
//   touch()           no annotations (MCP's defaults: possibly destructive)
//   drop({ table })   destructiveHint: true
//   echo({ text })    readOnlyHint: true; answers its input (hooks rewrite it)
//   blocked()         readOnlyHint: true (a hook blocks it)
//   runs()            how often each tool ran in this process
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "annotated", version: "1.0.0" });
const ran = {};
const text = (value) => ({ content: [{ type: "text", text: typeof value === "string" ? value : JSON.stringify(value) }] });
const count = (name) => { ran[name] = (ran[name] ?? 0) + 1; };

server.registerTool("peek", {
  description: "Reads a value",
  annotations: { readOnlyHint: true },
}, async () => { count("peek"); return text("peeked"); });

server.registerTool("note", {
  description: "Writes a note",
  inputSchema: { text: z.string() },
  annotations: { readOnlyHint: false, destructiveHint: false },
}, async ({ text: t }) => { count("note"); return text(`noted ${t}`); });

server.registerTool("touch", {
  description: "A tool that says nothing about itself",
}, async () => { count("touch"); return text("touched"); });

server.registerTool("drop", {
  description: "Drops a table",
  inputSchema: { table: z.string() },
  annotations: { readOnlyHint: false, destructiveHint: true },
}, async ({ table }) => { count("drop"); return text(`dropped ${table}`); });

server.registerTool("echo", {
  description: "Answers its input",
  inputSchema: { text: z.string() },
  annotations: { readOnlyHint: true },
}, async ({ text: t }) => { count("echo"); return text(t); });

server.registerTool("blocked", {
  description: "A tool the hook blocks",
  annotations: { readOnlyHint: true },
}, async () => { count("blocked"); return text("should not run"); });

server.registerTool("runs", {
  description: "How often each tool ran",
  annotations: { readOnlyHint: true },
}, async () => text(ran));

await server.connect(new StdioServerTransport());
