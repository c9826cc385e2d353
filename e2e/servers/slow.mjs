// A real MCP server (official TypeScript SDK, stdio) with one slow tool,
// for the durable-run tests: `sleep({ ms, tag })` answers `slept <tag>`
// after `ms`. Every call that starts is appended to the file SLOW_LOG
// names (`start <tag>`, and `done <tag>` as it answers), so a test can
// tell that no call ran twice, even across gateway processes.
// SLOW_START_MS delays the server's start (clients opened meanwhile meet a
// gateway whose upstream is still starting).
import { appendFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "slow", version: "1.0.0" });
server.registerTool("sleep", {
  description: "Answers after ms milliseconds",
  inputSchema: { ms: z.number(), tag: z.string() },
  annotations: { readOnlyHint: true },
}, async ({ ms, tag }) => {
  if (process.env.SLOW_LOG) appendFileSync(process.env.SLOW_LOG, `start ${tag}\n`);
  await new Promise((resolve) => setTimeout(resolve, ms));
  if (process.env.SLOW_LOG) appendFileSync(process.env.SLOW_LOG, `done ${tag}\n`);
  return { content: [{ type: "text", text: `slept ${tag}` }] };
});
if (process.env.SLOW_START_MS) await new Promise((resolve) => setTimeout(resolve, Number(process.env.SLOW_START_MS)));
await server.connect(new StdioServerTransport());
