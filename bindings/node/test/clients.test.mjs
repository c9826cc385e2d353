// The gateway through npm, as MCP clients start it: every npm- and
// cargo-route command line the README's "Connect an MCP client" section documents is started by the
// official TypeScript MCP client, which lists exactly `exec` and `wait`;
// and the package's bin runs the rest of the command line.
//
// Environment (set by `cargo xtask test-npm`): CODEMODE_README, the
// repository's README.md; CODEMODE_BIN, the cargo-built binary standing in
// for ~/.cargo/bin/codemode.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const require = createRequire(import.meta.url);
const everything = require.resolve("@modelcontextprotocol/server-everything/dist/index.js");
const project = process.cwd();
const dir = mkdtempSync(join(tmpdir(), "codemode-clients-"));
const config = join(dir, "gateway.json5");
writeFileSync(
  config,
  `{ tools: { codeMode: { enabled: true } },
     store: "memory",
     mcpServers: { everything: { command: ${JSON.stringify(process.execPath)}, args: [${JSON.stringify(everything)}] } } }`,
);
test.after(() => rmSync(dir, { recursive: true, force: true }));

/** Every documented npm- and cargo-route { client, command, args } of the README section (the uvx and pip routes are the Python package's test). */
function documentedCommandLines() {
  const readme = readFileSync(process.env.CODEMODE_README, "utf8");
  const section = readme.split("<!-- client-configs:start -->")[1]?.split("<!-- client-configs:end -->")[0];
  assert.ok(section, "the README has a client-configs section");
  const found = [];
  let client = "";
  const blocks = section.matchAll(/\*\*([^*]+)\*\*|```(json|sh|toml)\n([\s\S]*?)```/g);
  for (const m of blocks) {
    if (m[1]) {
      client = m[1];
      continue;
    }
    const [, , kind, body] = m;
    if (kind === "json") {
      const parsed = JSON.parse(body);
      const server = (parsed.mcpServers ?? parsed.servers).codemode;
      found.push({ client, command: server.command, args: server.args });
    } else if (kind === "toml") {
      const command = JSON.parse(/^command = (.*)$/m.exec(body)[1]);
      const args = JSON.parse(/^args = (.*)$/m.exec(body)[1]);
      found.push({ client, command, args });
    } else {
      for (const line of body.trim().split("\n")) {
        const [, rest] = line.split(" -- ");
        const [command, ...args] = rest.split(" ");
        found.push({ client, command, args });
      }
    }
  }
  return found.filter((l) => l.command === "npx" || l.command === "/home/you/.cargo/bin/codemode");
}

/** The documented command line with this machine's paths. */
function localize({ command, args }) {
  const swap = (s) => s.replace("/path/to/gateway.json5", config);
  return {
    command: command === "/home/you/.cargo/bin/codemode" ? process.env.CODEMODE_BIN : command,
    args: args.map(swap),
  };
}

async function connect(command, args) {
  const transport = new StdioClientTransport({ command, args, cwd: project, stderr: "pipe" });
  const client = new Client({ name: "readme-check", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

test("every client config in the README starts a gateway that lists exactly exec and wait", async () => {
  const lines = documentedCommandLines();
  const clients = new Set(lines.map((l) => l.client.split(" ")[0]));
  for (const expected of ["Claude", "Cursor", "VS", "Codex"]) assert.ok(clients.has(expected), `README documents ${expected}`);
  assert.ok(lines.length >= 10, `npm and cargo routes for five clients: ${lines.length}`);
  assert.ok(lines.some((l) => l.command === "npx") && lines.some((l) => l.command.endsWith("/codemode")));
  for (const line of lines) {
    const { command, args } = localize(line);
    const client = await connect(command, args);
    try {
      const { tools } = await client.listTools();
      assert.deepEqual(tools.map((t) => t.name).sort(), ["exec", "wait"], `${line.client}: ${command} ${args.join(" ")}`);
    } finally {
      await client.close();
    }
  }
});

test("npx codemode serve: a real MCP client runs a cell that calls the upstream server", async () => {
  const client = await connect("npx", ["codemode", "serve", "--config", config]);
  try {
    const r = await client.callTool({
      name: "exec",
      arguments: { code: "const e = await MCP.everything.echo({ message: 'via npm' }); return e.content[0].text" },
    });
    const result = r.structuredContent ?? JSON.parse(r.content[0].text);
    assert.equal(result.status, "completed", JSON.stringify(r));
    assert.equal(result.value, "Echo: via npm");
  } finally {
    await client.close();
  }
});

test("the bin runs the whole command line with its exit statuses", () => {
  const bin = join(project, "node_modules/.bin/codemode");
  const version = execFileSync(bin, ["--version"], { encoding: "utf8" });
  assert.match(version, /^codemode \d+\.\d+\.\d+/);
  const exec = spawnSync(bin, ["exec", "--store", "memory", "-"], { input: "return 6 * 7", encoding: "utf8" });
  assert.equal(exec.status, 0, exec.stderr);
  assert.equal(JSON.parse(exec.stdout).value, 42);
  const failed = spawnSync(bin, ["exec", "--store", "memory", "-"], { input: "throw new Error('x')", encoding: "utf8" });
  assert.equal(failed.status, 1);
  assert.equal(JSON.parse(failed.stdout).status, "failed");
  const check = spawnSync(bin, ["check-config", "--offline", config], { encoding: "utf8" });
  assert.equal(check.status, 0, check.stderr + check.stdout);
  const catalog = spawnSync(bin, ["catalog", "--config", config], { encoding: "utf8" });
  assert.equal(catalog.status, 0, catalog.stderr);
  assert.ok(catalog.stdout.includes("mcp:everything:echo"));
  const usage = spawnSync(bin, ["serve"], { encoding: "utf8" });
  assert.equal(usage.status, 2);
  assert.match(usage.stderr, /--config/);
  const approvals = spawnSync(bin, ["approvals", "list"], { encoding: "utf8", env: { ...process.env, CODEMODE_ADMIN_TOKEN: "" } });
  assert.equal(approvals.status, 2);
  assert.match(approvals.stderr, /admin/);
});
