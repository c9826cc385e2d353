// The gateway as the client of the MCP conformance suite's servers: the
// suite starts a scenario's server (and authorization server) and runs
// `node client.mjs <server url>`; this turns the scenario into what a user
// of codemode does. The server becomes the upstream `s` of a config;
// OAuth scenarios run `codemode login s` first, playing the browser (the
// suite's authorization server redirects at once); then `codemode serve`
// runs with a real MCP client (the official TypeScript SDK) connected, and
// one cell calls every tool of `MCP.s` with arguments made from its schema.
// The client answers elicitations by accepting with nothing filled in, so
// the defaults it applies are what the server gets back.
//
// When the gateway says a call needs another login (403
// `insufficient_scope` on a stored login), the login is run again, as a
// user would, at most twice.
//
// Env: CODEMODE_BIN (the binary), MCP_CONFORMANCE_SCENARIO and
// MCP_CONFORMANCE_CONTEXT (set by the suite).
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const BIN = process.env.CODEMODE_BIN;
const url = process.argv.at(-1);
const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? "";
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT ?? "{}");
// The client ID metadata document the suite's authorization servers know.
const CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json";
const MAX_LOGINS = 3;

const dir = mkdtempSync(join(tmpdir(), "codemode-conformance-"));
const env = { ...process.env, CODEMODE_DATA_DIR: join(dir, "data"), CODEMODE_LOG: process.env.CODEMODE_LOG ?? "warn" };

function serverConfig() {
  if (scenario === "auth/client-credentials-jwt") {
    env.CONFORMANCE_KEY = context.private_key_pem;
    return { url, oauth: { clientCredentials: { clientId: context.client_id, privateKey: "${CONFORMANCE_KEY}", signingAlgorithm: context.signing_algorithm } } };
  }
  if (scenario === "auth/client-credentials-basic") {
    env.CONFORMANCE_SECRET = context.client_secret;
    return { url, oauth: { clientCredentials: { clientId: context.client_id, clientSecret: "${CONFORMANCE_SECRET}" } } };
  }
  if (scenario.startsWith("auth/")) {
    const grant = { clientMetadataUrl: CLIENT_METADATA_URL };
    if (context.client_id) {
      grant.clientId = context.client_id;
      if (context.client_secret) {
        env.CONFORMANCE_SECRET = context.client_secret;
        grant.clientSecret = "${CONFORMANCE_SECRET}";
      }
    }
    return { url, oauth: { authorizationCode: grant } };
  }
  return { url };
}

const configPath = join(dir, "codemode.json");
const server = serverConfig();
// No approvals: the suite's tools carry no annotations (so they count as
// destructive), and the elicitations this client answers are the server's.
writeFileSync(configPath, JSON.stringify({ mcpServers: { s: server }, store: "memory", approvals: { mode: "never" } }));

/** `codemode login s`, playing the browser: fetch the printed authorization
 * URL without following it, deliver its redirect to the login's listener. */
async function login() {
  const child = spawn(BIN, ["login", "s", "--config", configPath, "--no-browser", "--timeout", "20"], {
    env,
    stdio: ["ignore", "inherit", "pipe"],
  });
  let stderr = "";
  const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  const shown = await new Promise((resolve) => {
    child.stderr.on("data", (chunk) => {
      stderr += chunk;
      process.stderr.write(chunk);
      const m = /^(https?:\/\/\S+)$/m.exec(stderr);
      if (m) resolve(m[1]);
    });
    exited.then(() => resolve(null));
  });
  if (shown) {
    const authorize = await fetch(shown, { redirect: "manual" });
    const back = authorize.headers.get("location");
    if (back) await fetch(back).then((r) => r.text()).catch(() => {});
    else console.error(`the authorization endpoint answered ${authorize.status} without a redirect`);
  }
  const code = await exited;
  console.error(`codemode login exited with ${code}`);
  return code === 0;
}

// Arguments a tool accepts, from its input schema.
const CELL = `
const sample = (schema) => {
  if (!schema || typeof schema !== "object") return "hello";
  if (schema.default !== undefined) return schema.default;
  if (Array.isArray(schema.enum)) return schema.enum[0];
  switch (schema.type) {
    case "number": case "integer": return 2;
    case "boolean": return true;
    case "array": return [];
    case "object": return {};
    default: return "hello";
  }
};
const api = await MCP.s.$api(undefined, { schema: true });
const calls = [];
for (const tool of api.tools) {
  const input = {};
  for (const [key, schema] of Object.entries(tool.inputSchema?.properties ?? {})) input[key] = sample(schema);
  try {
    calls.push({ tool: tool.tool, result: await MCP.s[tool.name](input) });
  } catch (e) {
    calls.push({ tool: tool.tool, error: String(e?.message ?? e) });
  }
}
return calls;
`;

/** `codemode serve` with the SDK's client: one exec of CELL. */
async function callEveryTool() {
  const transport = new StdioClientTransport({
    command: BIN,
    args: ["serve", "--config", configPath],
    env,
    stderr: "inherit",
  });
  const client = new Client(
    { name: "codemode-conformance", version: "1.0.0" },
    { capabilities: { elicitation: { form: { applyDefaults: true } } } },
  );
  client.setRequestHandler(ElicitRequestSchema, () => ({ action: "accept", content: {} }));
  await client.connect(transport);
  try {
    const answer = await client.callTool({ name: "exec", arguments: { code: CELL } }, undefined, { timeout: 25000 });
    const text = answer.content?.map((c) => c.text ?? "").join("\n") ?? "";
    console.error(text.slice(0, 4000));
    return text;
  } finally {
    await client.close();
  }
}

const authorizationCode = server.oauth?.authorizationCode !== undefined;
let logins = 0;
for (;;) {
  if (authorizationCode) {
    logins += 1;
    if (!(await login())) process.exit(1);
  }
  const said = await callEveryTool();
  // The gateway asks for another login when the server wants more scope.
  if (authorizationCode && /run `codemode login s\b/.test(said) && logins < MAX_LOGINS) continue;
  break;
}
