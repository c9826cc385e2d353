// A small real MCP server (official TypeScript SDK, stdio) whose tools
// misbehave on purpose, for the gateway's end-to-end tests:
//   slow({ ms })   answers after `ms` milliseconds
//   crash()        exits the process in the middle of the call
//   hang()         blocks the event loop forever (no answers, no pings)
//   pid()          this process's pid (tells a restart apart)
//   grow()         registers one more tool and sends tools/list_changed
//   badReply({ kind }) answers on the wire with a reply the gateway cannot
//                  use ("huge": 65 MiB, "deep": structuredContent 130 levels,
//                  "nan": a bare NaN, "wrongId": another request's id), then
//                  the real answer 300 ms later (which must be dropped)
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "flaky", version: "1.0.0" });
const text = (value) => ({ content: [{ type: "text", text: String(value) }] });

server.registerTool("slow", {
  description: "Answers after `ms` milliseconds",
  annotations: { readOnlyHint: true },
  inputSchema: { ms: z.number().describe("How long to take") },
}, async ({ ms }) => {
  await new Promise((resolve) => setTimeout(resolve, ms));
  return text(`slept ${ms} ms`);
});

server.registerTool("crash", { description: "Exits the server in the middle of the call", annotations: { destructiveHint: false } }, async () => {
  setTimeout(() => process.exit(3), 10);
  return new Promise(() => {});
});

server.registerTool("hang", { description: "Blocks the server forever", annotations: { destructiveHint: false } }, async () => {
  setTimeout(() => { for (;;) {} }, 10);
  return new Promise(() => {});
});

server.registerTool("pid", { description: "The server's process id", annotations: { readOnlyHint: true } }, async () => text(process.pid));

let grown = 0;
server.registerTool("grow", { description: "Adds a tool and announces it with tools/list_changed", annotations: { destructiveHint: false } }, async () => {
  grown += 1;
  const name = `grown_${grown}`;
  server.registerTool(name, { description: `Tool number ${grown} added at run time`, annotations: { readOnlyHint: true } }, async () => text(name));
  return text(name);
});

server.registerTool("badReply", {
  description: "Answers with a broken reply on the wire",
  annotations: { readOnlyHint: true },
  inputSchema: { kind: z.enum(["huge", "deep", "nan", "wrongId"]) },
}, async ({ kind }, extra) => {
  const id = extra.requestId;
  const idText = JSON.stringify(id);
  let line;
  if (kind === "huge") {
    line = `{"jsonrpc":"2.0","id":${idText},"result":{"content":[{"type":"text","text":"${"x".repeat(65 << 20)}"}]}}`;
  } else if (kind === "deep") {
    line = `{"jsonrpc":"2.0","id":${idText},"result":{"content":[],"structuredContent":{"v":${"[".repeat(130)}1${"]".repeat(130)}}}}`;
  } else if (kind === "nan") {
    line = `{"jsonrpc":"2.0","id":${idText},"result":NaN}`;
  } else {
    const stray = typeof id === "number" ? id + 100000 : `${id}-stray`;
    line = `{"jsonrpc":"2.0","id":${JSON.stringify(stray)},"result":{"content":[{"type":"text","text":"stray"}]}}`;
  }
  process.stdout.write(line + "\n");
  await new Promise((resolve) => setTimeout(resolve, 300));
  return text(`late real answer to ${kind}`);
});

await server.connect(new StdioServerTransport());
