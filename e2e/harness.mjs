// Shared pieces of the end-to-end tests and the benchmark: the gateway
// config with real upstream servers, and real MCP clients (the official
// TypeScript SDK) connected to `codemode serve` over stdio or HTTP.
import { spawn } from "node:child_process";
import { isDeepStrictEqual } from "node:util";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

export const here = dirname(fileURLToPath(import.meta.url));
export const BIN = process.env.CODEMODE_BIN;
if (!BIN) throw new Error("set CODEMODE_BIN to the codemode binary (the Rust test harness does)");
// Gateways started here keep their data (the default run store runs.db,
// OAuth tokens) in a directory of this test process, never in the user's.
if (!process.env.CODEMODE_DATA_DIR) {
  process.env.CODEMODE_DATA_DIR = mkdtempSync(join(tmpdir(), "codemode-e2e-data-"));
}

const modules = join(here, "node_modules");
export const servers = {
  everything: join(modules, "@modelcontextprotocol/server-everything/dist/index.js"),
  memory: join(modules, "@modelcontextprotocol/server-memory/dist/index.js"),
  flaky: join(here, "servers/flaky.mjs"),
  annotated: join(here, "servers/annotated.mjs"),
};

/** The benchmarks' cell: 50 sequential calls to server-everything's
 * get-sum, summed (1275). */
export const FIFTY_SUMS = `
let total = 0;
for (let i = 0; i < 50; i++) {
  const r = await MCP.everything.getSum({ a: i, b: 1 });
  total += Number(/is (\\d+)\\./.exec(r.content[0].text)[1]);
}
return total;`;

/** A free TCP port on loopback. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Waits until `url` accepts TCP connections. */
async function waitForPort(port, ms = 15000) {
  const { connect } = await import("node:net");
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const ok = await new Promise((resolve) => {
      const c = connect(port, "127.0.0.1", () => { c.end(); resolve(true); });
      c.on("error", () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`nothing listens on port ${port}`);
}

/** Starts `servers/<script>` (a test server that prints `listening <URL>`
 * when ready) with extra `env`; returns { child, url }. */
export async function startListening(script, env = {}) {
  const child = spawn(process.execPath, [join(here, "servers", script)], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, ...env },
  });
  const url = await new Promise((resolve, reject) => {
    let seen = "";
    child.stdout.on("data", (c) => {
      seen += c;
      const m = /listening (\S+)\n/.exec(seen);
      if (m) resolve(m[1]);
    });
    child.on("exit", (code) => reject(new Error(`${script} exited with ${code}`)));
  });
  return { child, url };
}

/** Starts server-everything over streamable HTTP; returns { url, stop }. */
export async function everythingOverHttp() {
  const port = await freePort();
  const child = spawn(process.execPath, [servers.everything, "streamableHttp"], {
    env: { ...process.env, PORT: String(port) },
    stdio: ["ignore", "ignore", "pipe"],
  });
  child.stderr.resume();
  await waitForPort(port);
  return { url: `http://127.0.0.1:${port}/mcp`, stop: () => child.kill() };
}

/** Writes a gateway config; `extra` adds servers, `flaky: false` leaves
 * out the misbehaving ones. Returns its path. */
export function writeConfig({ timeoutMs = 1500, extra = {}, flaky = true } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "codemode-e2e-"));
  const config = {
    tools: { codeMode: { enabled: true, timeoutMs } },
    mcpServers: {
      everything: { command: process.execPath, args: [servers.everything] },
      memory: {
        command: process.execPath,
        args: [servers.memory],
        env: { MEMORY_FILE_PATH: join(dir, "memory.jsonl") },
      },
      ...(flaky ? {
        flaky: { command: process.execPath, args: [servers.flaky], timeoutMs: 20000 },
        hangs: { command: process.execPath, args: [servers.flaky], timeoutMs: 1500 },
      } : {}),
      ...extra,
    },
  };
  const path = join(dir, "gateway.json");
  writeFileSync(path, JSON.stringify(config, null, 2));
  return path;
}

/** A client; with `onElicit` it declares elicitation and answers
 * `elicitation/create` requests with it. */
function newClient({ onElicit } = {}) {
  if (!onElicit) return new Client({ name: "codemode-e2e", version: "1.0.0" });
  const client = new Client(
    { name: "codemode-e2e", version: "1.0.0" },
    { capabilities: { elicitation: {} } },
  );
  client.setRequestHandler(ElicitRequestSchema, (request) => onElicit(request.params));
  return client;
}

/** A real MCP client on `codemode serve` over stdio. */
export async function connectStdio(configPath, { onElicit, args = [], env = {} } = {}) {
  const transport = new StdioClientTransport({
    command: BIN,
    args: ["serve", "--config", configPath, ...args],
    env: { ...process.env, CODEMODE_LOG: process.env.CODEMODE_LOG ?? "warn", ...env },
    stderr: "inherit",
  });
  const client = newClient({ onElicit });
  await client.connect(transport);
  // `pid`: the gateway process (to kill it as a crash would).
  return { client, pid: transport.pid, close: () => client.close() };
}

/** Starts `codemode serve --http 127.0.0.1:0`; returns { url, stop }
 * (and `admin`, the operator endpoint's URL, when `args` ask for one). */
export async function startHttpGateway(configPath, { args = [], env = {}, bin = BIN } = {}) {
  const child = spawn(bin, ["serve", "--config", configPath, "--http", "127.0.0.1:0", ...args], {
    env: { ...process.env, CODEMODE_LOG: process.env.CODEMODE_LOG ?? "warn", ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let admin;
  let metrics;
  const url = await new Promise((resolve, reject) => {
    let seen = "";
    const timer = setTimeout(() => reject(new Error(`the gateway did not start:\n${seen}`)), 30000);
    child.stderr.on("data", (chunk) => {
      seen += chunk;
      process.stderr.write(chunk);
      // Only a whole line: stderr may arrive cut anywhere.
      const a = /operator endpoint at (http:\/\/\S+)\/approvals\n/.exec(seen);
      if (a) admin = a[1];
      const mt = /metrics at (http:\/\/\S+\/metrics)\n/.exec(seen);
      if (mt) metrics = mt[1];
      const m = /serving MCP at (http:\/\/\S+\/mcp)\n/.exec(seen);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    child.on("exit", (code) => reject(new Error(`the gateway exited with ${code}:\n${seen}`)));
  });
  const exited = new Promise((resolve) => child.on("exit", resolve));
  return {
    url,
    admin,
    metrics,
    pid: child.pid,
    stop: async () => { child.kill("SIGINT"); return exited; },
    /** Ends it as a crash would: no shutdown at all. */
    kill: async () => { child.kill("SIGKILL"); return exited; },
  };
}

/** A real MCP client on an HTTP gateway. */
export async function connectHttp(url, { onElicit, headers } = {}) {
  const client = newClient({ onElicit });
  const transport = new StreamableHTTPClientTransport(new URL(url), headers ? { requestInit: { headers } } : undefined);
  await client.connect(transport);
  return { client, transport, close: () => client.close() };
}

/** The code-mode result of an exec or wait call, checked for shape: the
 * model's view (`structuredContent`, or the JSON text with
 * `results.form: "text"`), with the full telemetry from
 * `_meta["codemode/telemetry"]` in place of the model's short summary
 * (which stays in `modelTelemetry`). */
export function resultOf(response) {
  const text = response.content?.[0]?.text;
  let parsed;
  if (response.structuredContent !== undefined) {
    parsed = response.structuredContent;
    // structured: a one-paragraph summary starting with the status;
    // both: the same JSON again.
    if (!text.startsWith(parsed.status) && !isDeepStrictEqual(JSON.parse(text), parsed)) {
      throw new Error(`the text item neither summarizes nor repeats the result: ${text.slice(0, 200)}`);
    }
  } else {
    parsed = JSON.parse(text);
  }
  if ((parsed.status === "failed") !== (response.isError === true)) {
    throw new Error(`isError ${response.isError} does not match status ${parsed.status}`);
  }
  // Older gateways (benchmarked side by side) have no _meta telemetry;
  // results.test.mjs checks this one has.
  const full = response._meta?.["codemode/telemetry"];
  return full ? { ...parsed, telemetry: full, modelTelemetry: parsed.telemetry } : parsed;
}

export async function exec(client, code, language) {
  const args = language ? { code, language } : { code };
  return resultOf(await client.callTool({ name: "exec", arguments: args }));
}

export async function wait(client, runId) {
  return resultOf(await client.callTool({ name: "wait", arguments: { runId } }));
}
