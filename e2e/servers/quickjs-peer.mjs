// A bare code-mode peer for the side-by-side gateway bench: an MCP server
// (stdio, official TypeScript SDK) with one `exec` tool that runs the cell
// in a fresh quickjs-emscripten VM (QuickJS compiled to wasm, run by V8)
// and bridges `MCP.<server>.<tool>(args)` to upstream stdio servers with a
// naive JSON bridge: no limits beyond a heap cap, no suspension, no
// catalog, no approvals. It is what "QuickJS in wasm behind MCP" costs at
// the least, so the bench can show what codemode's engine and gateway add.
// Usage: node quickjs-peer.mjs <name>=<server.js> [...]
import { getQuickJS } from "quickjs-emscripten";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const QuickJS = await getQuickJS();
const upstreams = {};
for (const arg of process.argv.slice(2)) {
  const [name, script] = arg.split("=");
  const client = new Client({ name: "quickjs-peer", version: "1" });
  await client.connect(new StdioClientTransport({ command: process.execPath, args: [script], stderr: "ignore" }));
  upstreams[name] = client;
}

// `getSum` → `get-sum`, as codemode's MCP namespace names tools.
const PRELUDE = `globalThis.MCP = new Proxy({}, { get: (_, server) => new Proxy({}, {
  get: (_, tool) => (args) => __call(String(server), String(tool).replace(/[A-Z]/g, (c) => "-" + c.toLowerCase()),
    JSON.stringify(args ?? {})).then(JSON.parse),
}) });`;

async function runCell(code) {
  const runtime = QuickJS.newRuntime();
  runtime.setMemoryLimit(64 * 1024 * 1024);
  const vm = runtime.newContext();
  try {
    const call = vm.newFunction("__call", (serverH, toolH, argsH) => {
      const server = vm.getString(serverH);
      const tool = vm.getString(toolH);
      const args = JSON.parse(vm.getString(argsH));
      const deferred = vm.newPromise();
      const upstream = upstreams[server];
      const reply = upstream
        ? upstream.callTool({ name: tool, arguments: args })
        : Promise.reject(new Error(`no server ${server}`));
      reply.then(
        (r) => { if (vm.alive) { const s = vm.newString(JSON.stringify(r)); deferred.resolve(s); s.dispose(); } },
        (e) => { if (vm.alive) { const s = vm.newError(String(e?.message ?? e)); deferred.reject(s); s.dispose(); } },
      );
      deferred.settled.then(() => { if (vm.alive) runtime.executePendingJobs(); });
      return deferred.handle;
    });
    vm.setProp(vm.global, "__call", call);
    call.dispose();
    vm.unwrapResult(vm.evalCode(PRELUDE)).dispose();
    const started = vm.evalCode(`(async () => {\n${code}\n})()`);
    if (started.error) {
      const error = vm.dump(started.error);
      started.error.dispose();
      return { status: "failed", error };
    }
    const settled = vm.resolvePromise(started.value);
    started.value.dispose();
    runtime.executePendingJobs();
    const outcome = await settled;
    if (outcome.error) {
      const error = vm.dump(outcome.error);
      outcome.error.dispose();
      return { status: "failed", error };
    }
    const value = vm.dump(outcome.value);
    outcome.value.dispose();
    return { status: "completed", value };
  } finally {
    vm.dispose();
    runtime.dispose();
  }
}

const server = new McpServer({ name: "quickjs-peer", version: "1" });
server.registerTool("exec", { inputSchema: { code: z.string() } }, async ({ code }) => {
  const result = await runCell(code);
  return { content: [{ type: "text", text: JSON.stringify(result) }], isError: result.status !== "completed" };
});
await server.connect(new StdioServerTransport());
