// End-to-end: the official TypeScript MCP client drives `codemode serve`
// (over stdio and over streamable HTTP) with real upstream MCP servers
// behind it (server-everything over stdio and HTTP, server-memory, and the
// misbehaving `servers/flaky.mjs`).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { join } from "node:path";
import {
  connectHttp, connectStdio, everythingOverHttp, exec, here, startHttpGateway, wait, writeConfig,
} from "./harness.mjs";

function textOf(result) {
  return result.content.map((c) => c.text ?? "").join("");
}

for (const transport of ["stdio", "http"]) {
  describe(`gateway over ${transport}`, () => {
    let client, close, stopGateway, upstreamHttp;

    before(async () => {
      upstreamHttp = await everythingOverHttp();
      const config = writeConfig({ extra: { web: { url: upstreamHttp.url } } });
      if (transport === "stdio") {
        ({ client, close } = await connectStdio(config));
      } else {
        const gateway = await startHttpGateway(config);
        stopGateway = gateway.stop;
        ({ client, close } = await connectHttp(gateway.url));
      }
    });

    after(async () => {
      await close?.();
      await stopGateway?.();
      upstreamHttp?.stop();
    });

    test("the tool list is exactly exec and wait, small, and names the servers", async () => {
      const { tools } = await client.listTools();
      assert.deepEqual(tools.map((t) => t.name).sort(), ["exec", "wait"]);
      const bytes = Buffer.byteLength(JSON.stringify(tools));
      assert.ok(bytes < 4096, `tool list is ${bytes} bytes`);
      const exec = tools.find((t) => t.name === "exec");
      for (const server of ["everything", "memory", "flaky", "web"]) {
        assert.match(exec.description, new RegExp(`\\b${server} \\(`), `exec description names ${server}`);
      }
      assert.match(exec.description, /API\.read\("mcp\/<server>\.d\.ts"\)/);
    });

    test("MCP tools are callable only through the MCP namespace", async () => {
      const r = await exec(client, `
        let viaTools;
        try { await tools.call("mcp:everything:echo", { message: "x" }); } catch (e) { viaTools = e.message; }
        return { all: ALL_TOOLS.length, viaTools, servers: Object.keys(MCP), conveniences: Object.keys(tools) };
      `);
      assert.equal(r.status, "completed", JSON.stringify(r));
      assert.equal(r.value.all, 0);
      assert.match(r.value.viaTools, /MCP tool/);
      assert.deepEqual(r.value.servers, ["everything", "flaky", "hangs", "memory", "web"]);
      assert.deepEqual(r.value.conveniences, ["search", "describe", "call"]);
      assert.equal(r.telemetry.catalogBySource.mcp > 20, true);
    });

    test("API.search finds MCP tools across servers; a wrong name fails before anything runs", async () => {
      const r = await exec(client, `
        const hits = await API.search("sum of two numbers", { limit: 3 });
        const onWeb = await API.search("sum", { server: "web", limit: 1 });
        return { hits, onWeb, plain: await tools.search("sum") };
      `);
      assert.equal(r.status, "completed", JSON.stringify(r));
      assert.ok(["MCP.everything.getSum", "MCP.web.getSum"].includes(r.value.hits[0].path), JSON.stringify(r.value.hits));
      assert.equal(r.value.hits[0].tool, "get-sum");
      assert.match(r.value.hits[0].signature, /^getSum\(\{ a: number, b: number \}\)$/);
      assert.equal(r.value.onWeb[0].path, "MCP.web.getSum");
      assert.deepEqual(r.value.plain, [], "tools.search never returns MCP tools");
      const { tools } = await client.listTools();
      assert.match(tools.find((t) => t.name === "exec").description, /API\.search\(query/);

      const wrong = await exec(client, `
        await MCP.memory.createEntities({ entities: [{ name: "NeverWritten", entityType: "probe", observations: [] }] });
        return await MCP.everything.get_sum({ a: 1, b: 2 });
      `);
      assert.equal(wrong.status, "failed", JSON.stringify(wrong));
      assert.equal(wrong.code, "invalid_input");
      assert.match(wrong.error, /line 3, column \d+: MCP\.everything\.get_sum is not a tool of MCP\.everything; did you mean MCP\.everything\.getSum/);
      const graph = await exec(client, `return JSON.stringify(await MCP.memory.readGraph())`);
      assert.equal(graph.status, "completed", JSON.stringify(graph));
      assert.doesNotMatch(graph.value, /NeverWritten/, "the refused cell's first call never ran");

      const dynamic = await exec(client, `
        const name = "getSums";
        try { await MCP.everything[name]({ a: 1, b: 2 }); } catch (e) { return { code: e.code, message: e.message }; }
      `);
      assert.equal(dynamic.status, "completed", JSON.stringify(dynamic));
      assert.equal(dynamic.value.code, "nested_tool_failed");
      assert.match(dynamic.value.message, /did you mean MCP\.everything\.getSum/);
    });

    test("upstream tools over stdio and HTTP, several in parallel", async () => {
      const r = await exec(client, `
        const echo = await MCP.everything.echo({ message: "hello" });
        const sums = await Promise.all([1, 2, 3, 4, 5, 6, 7, 8].map((i) => MCP.everything.getSum({ a: i, b: 10 })));
        const remote = await MCP.web.getSum({ a: 40, b: 2 });
        await MCP.memory.createEntities({ entities: [{ name: "Ada", entityType: "person", observations: ["wrote the first program"] }] });
        const graph = await MCP.memory.readGraph();
        return { echo: echo.content[0].text, sums: sums.map((s) => s.content[0].text), remote: remote.content[0].text, graph };
      `);
      assert.equal(r.status, "completed", JSON.stringify(r));
      assert.equal(r.value.echo, "Echo: hello");
      assert.equal(r.value.sums.length, 8);
      assert.equal(r.value.sums[7], "The sum of 8 and 10 is 18.");
      assert.equal(r.value.remote, "The sum of 40 and 2 is 42.");
      assert.match(JSON.stringify(r.value.graph), /Ada/);
      assert.ok(r.telemetry.nestedToolIds.includes("mcp:web:get-sum"));
      assert.equal(r.telemetry.nestedCallCount, 12);
    });

    test("arguments: one object, defaults applied, missing required keys named", async () => {
      const r = await exec(client, `
        const errors = [];
        for (const f of [() => MCP.everything.getSum({ a: 1 }), () => MCP.everything.getSum(1, 2), () => MCP.everything.echo("hi")]) {
          try { await f(); errors.push(null); } catch (e) { errors.push(e.message); }
        }
        // get-resource-links has { count: default 3 }: called with nothing.
        const links = await MCP.everything.getResourceLinks();
        return { errors, links: links.content.filter((c) => c.type === "resource_link").length };
      `);
      assert.equal(r.status, "completed", JSON.stringify(r));
      assert.match(r.value.errors[0], /missing required key `b`/);
      assert.match(r.value.errors[1], /exactly one object argument/);
      assert.match(r.value.errors[2], /one object argument/);
      assert.equal(r.value.links, 3);
    });

    test("resources and prompts", async () => {
      const r = await exec(client, `
        const list = await MCP.everything.resources.list();
        const first = list.resources[0];
        const read = await MCP.everything.resources.read({ uri: first.uri });
        const templates = await MCP.everything.resources.templates();
        const prompts = await MCP.everything.prompts.list();
        const prompt = await MCP.everything.prompts.get({ name: "args-prompt", arguments: { city: "Oslo" } });
        const memory = await MCP.memory.resources.list();
        return { n: list.resources.length, uri: read.contents[0].uri === first.uri,
          templates: templates.resourceTemplates.length, prompts: prompts.prompts.map((p) => p.name),
          prompt: prompt.messages[0].content.text, memory: memory.resources.map((x) => x.uri),
          memoryPrompts: typeof MCP.memory.prompts };
      `);
      assert.equal(r.status, "completed", JSON.stringify(r));
      assert.ok(r.value.n >= 1);
      assert.equal(r.value.uri, true);
      assert.ok(r.value.templates >= 1);
      assert.ok(r.value.prompts.includes("args-prompt"));
      assert.match(r.value.prompt, /Oslo/);
      assert.deepEqual(r.value.memory, ["memory://knowledge-graph"]);
      assert.equal(r.value.memoryPrompts, "undefined", "memory offers no prompts");
    });

    test("a slow upstream call makes exec wait and wait finish it", async () => {
      const r = await exec(client, `
        text("before");
        const slow = await MCP.flaky.slow({ ms: 2500 });
        text("after");
        return slow.content[0].text;
      `);
      assert.equal(r.status, "waiting", JSON.stringify(r));
      assert.equal(r.reason, "pending_tools");
      assert.deepEqual(r.pendingToolCalls.map((c) => c.toolId), ["mcp:flaky:slow"]);
      let next = r;
      while (next.status === "waiting") next = await wait(client, r.runId);
      assert.equal(next.status, "completed", JSON.stringify(next));
      assert.equal(next.value, "slept 2500 ms");
      assert.deepEqual(next.output, [{ type: "text", text: "after" }]);
    });

    test("an upstream that crashes mid-call fails that call and is restarted", async () => {
      const before = await exec(client, `return (await MCP.flaky.pid()).content[0].text`);
      assert.equal(before.status, "completed", JSON.stringify(before));
      const crashed = await exec(client, `return await MCP.flaky.crash()`);
      assert.equal(crashed.status, "failed", JSON.stringify(crashed));
      assert.equal(crashed.code, "nested_tool_failed");
      assert.match(crashed.error, /flaky/);
      const others = await exec(client, `return (await MCP.everything.echo({ message: "still here" })).content[0].text`);
      assert.equal(others.value, "Echo: still here", "other servers are unaffected");
      const after = await exec(client, `return (await MCP.flaky.pid()).content[0].text`);
      assert.equal(after.status, "completed", JSON.stringify(after));
      assert.notEqual(after.value, before.value, "a new server process answers");
    });

    test("a reply the gateway cannot use fails its call at once, with the reason", async () => {
      // flaky's timeoutMs is 20 s: a call that waited for its timeout would
      // take that long. Reading the 64 MiB reply may outlast the cell's
      // 1.5 s on a loaded machine; then the run waits and `wait` goes on.
      const started = Date.now();
      let r = await exec(client, `
        const out = {};
        for (const kind of ["huge", "deep", "nan", "wrongId"]) {
          try { await MCP.flaky.badReply({ kind }); out[kind] = "answered"; } catch (e) { out[kind] = e.message; }
        }
        out.after = (await MCP.flaky.pid()).content[0].text;
        return out;
      `);
      while (r.status === "waiting") r = await wait(client, r.runId);
      assert.ok(Date.now() - started < 15000, `took ${Date.now() - started} ms: a call waited for its timeout`);
      assert.equal(r.status, "completed", JSON.stringify(r).slice(0, 2000));
      assert.match(r.value.huge, /larger than 67108864 bytes/);
      assert.match(r.value.deep, /not valid JSON-RPC \(recursion limit exceeded/);
      assert.match(r.value.nan, /not valid JSON-RPC/);
      assert.match(r.value.wrongId, /with id \d+, which matches no request/);
      for (const kind of ["huge", "deep", "nan", "wrongId"]) assert.match(r.value[kind], /MCP server `flaky`/);
      assert.match(r.value.after, /^\d+$/, "the server keeps answering");
    });

    if (transport === "stdio") {
      test("a hung upstream times out its call and is restarted", async () => {
        const before = await exec(client, `return (await MCP.hangs.pid()).content[0].text`);
        const hung = await exec(client, `
          try { await MCP.hangs.hang(); return "answered"; } catch (e) { return e.message; }
        `);
        let r = hung;
        while (r.status === "waiting") r = await wait(client, hung.runId);
        assert.equal(r.status, "completed", JSON.stringify(r));
        assert.match(r.value, /did not answer within 1500 ms/);
        // The ping after the timeout fails (the event loop is blocked): the
        // server is killed and started again.
        let after;
        for (let i = 0; i < 40; i++) {
          const p = await exec(client, `try { return (await MCP.hangs.pid()).content[0].text } catch (e) { return "error: " + e.message }`);
          let v = p;
          while (v.status === "waiting") v = await wait(client, p.runId);
          after = v.value;
          if (after !== before.value && !String(after).startsWith("error")) break;
          await new Promise((r) => setTimeout(r, 250));
        }
        assert.notEqual(after, before.value);
        assert.doesNotMatch(String(after), /^error/);
      });

      test("tools/list_changed refreshes the catalog for new runs and reaches the client", async () => {
        let notified = 0;
        client.setNotificationHandler(ToolListChangedNotificationSchema, () => { notified += 1; });
        const grown = await exec(client, `return (await MCP.flaky.grow()).content[0].text`);
        assert.equal(grown.status, "completed", JSON.stringify(grown));
        let r;
        for (let i = 0; i < 40; i++) {
          r = await exec(client, `return "grown1" in MCP.flaky ? (await MCP.flaky.grown1()).content[0].text : null`);
          if (r.value) break;
          await new Promise((r) => setTimeout(r, 100));
        }
        assert.equal(r.value, "grown_1");
        // The exec description counts the new tool: the client is told to re-list.
        for (let i = 0; i < 40 && notified === 0; i++) await new Promise((r) => setTimeout(r, 50));
        assert.ok(notified >= 1, "the gateway sent notifications/tools/list_changed");
        const { tools } = await client.listTools();
        assert.match(tools.find((t) => t.name === "exec").description, /flaky \(7 tools\)/);
      });

      test("declaration files are valid TypeScript and type real calls", async () => {
        const r = await exec(client, `
          const files = await API.list("mcp/");
          const out = {};
          for (const f of files) out[f.path] = await API.read(f.path);
          let bad = [];
          for (const p of ["../etc/passwd", "mcp/../x", "./mcp/index.d.ts", "", "mcp/nope.d.ts"]) {
            try { await API.read(p); bad.push(null); } catch (e) { bad.push(e.message); }
          }
          const inline = await MCP.everything.$api("get-sum", { schema: true });
          return { files: files.map((f) => f.path), same: (await API.list("mcp")).length === files.length, out, bad, inline };
        `);
        assert.equal(r.status, "completed", JSON.stringify(r).slice(0, 2000));
        assert.deepEqual(r.value.files, [
          "mcp/everything.d.ts", "mcp/flaky.d.ts", "mcp/hangs.d.ts", "mcp/index.d.ts", "mcp/memory.d.ts", "mcp/web.d.ts",
        ]);
        assert.equal(r.value.same, true);
        assert.ok(r.value.bad.every((m) => typeof m === "string"), JSON.stringify(r.value.bad));
        assert.equal(r.value.inline.tools[0].name, "getSum");
        assert.deepEqual(r.value.inline.tools[0].inputSchema.required, ["a", "b"]);
        assert.match(r.value.inline.declarations, /function getSum\(input: \{/);

        const dir = mkdtempSync(join(tmpdir(), "codemode-dts-"));
        mkdirSync(join(dir, "mcp"));
        for (const [path, text] of Object.entries(r.value.out)) writeFileSync(join(dir, path), text);
        // A program written against the declarations, as a model would.
        writeFileSync(join(dir, "use.ts"), `
          async function main(): Promise<string> {
            const sum: McpToolResult = await MCP.everything.getSum({ a: 1, b: 2 });
            await MCP.memory.createEntities({ entities: [{ name: "x", entityType: "y", observations: [] }] });
            const files: ApiFile[] = await API.list("mcp");
            const header: McpApiHeader = await MCP.everything.$api("echo");
            await MCP.everything.resources.read({ uri: "demo://x" });
            await MCP.everything.prompts.get({ name: "simple-prompt" });
            // A tool with an outputSchema: its result is typed.
            const weather = await MCP.everything.getStructuredContent({ location: "Chicago" });
            const temperature: number = unwrap(weather).temperature;
            const conditions: string | undefined = weather.structuredContent?.conditions;
            return String(sum.isError) + files.length + header.path + temperature + conditions;
          }
          main();
        `);
        writeFileSync(join(dir, "misuse.ts"), `
          async function misuse() { await MCP.everything.getSum({ a: 1 }); }
          async function wrongType() {
            const humidity: string = unwrap(await MCP.everything.getStructuredContent({ location: "Chicago" })).humidity;
            return humidity;
          }
          misuse();
          wrongType();
        `);
        const tsc = join(here, "node_modules/typescript/bin/tsc");
        const files = Object.keys(r.value.out).map((p) => join(dir, p));
        const common = ["--noEmit", "--strict", "--target", "es2022", "--lib", "es2022"];
        try {
          execFileSync(process.execPath, [tsc, ...common, ...files, join(dir, "use.ts")], { stdio: "pipe" });
        } catch (e) {
          assert.fail(`tsc rejected the declarations:\n${e.stdout}`);
        }
        let misuse = "";
        try {
          execFileSync(process.execPath, [tsc, ...common, ...files, join(dir, "misuse.ts")], { stdio: "pipe" });
        } catch (e) {
          misuse = String(e.stdout);
        }
        assert.match(misuse, /Property 'b' is missing/, "a missing required key is a type error");
        assert.match(misuse, /Type 'number' is not assignable to type 'string'/, "the outputSchema types the result");
        const weather = await exec(client, `return unwrap(await MCP.everything.getStructuredContent({ location: "Chicago" }));`);
        assert.deepEqual(weather.value, { temperature: 36, conditions: "Light rain / drizzle", humidity: 82 });
      });

      test("TypeScript cells call MCP tools", async () => {
        const r = await exec(client, `
          const r: McpToolResult = await MCP.everything.echo({ message: "typed" } as { message: string });
          return (r.content as Array<{ text: string }>)[0].text;
        `, "typescript");
        assert.equal(r.status, "completed", JSON.stringify(r));
        assert.equal(r.value, "Echo: typed");
      });
    }

    if (transport === "http") {
      test("each MCP client session is its own scope", async () => {
        const r = await exec(client, `await yield_control("hold"); return "resumed";`);
        assert.equal(r.status, "waiting");
        const other = await connectHttp(client.transport._url.href);
        try {
          const stolen = await wait(other.client, r.runId);
          assert.equal(stolen.status, "failed");
          assert.equal(stolen.code, "invalid_input");
          assert.match(stolen.error, /another/);
        } finally {
          await other.close();
        }
        const mine = await wait(client, r.runId);
        assert.equal(mine.value, "resumed");
      });

      test("many concurrent sessions", async () => {
        const clients = await Promise.all(Array.from({ length: 8 }, () => connectHttp(client.transport._url.href)));
        try {
          const results = await Promise.all(clients.map((c, i) =>
            exec(c.client, `return (await MCP.everything.getSum({ a: ${i}, b: 1 })).content[0].text`)));
          results.forEach((r, i) => assert.equal(r.value, `The sum of ${i} and 1 is ${i + 1}.`));
        } finally {
          await Promise.all(clients.map((c) => c.close()));
        }
      });
    }
  });
}

// A client that connects while an upstream is still starting: every one of
// its first cells, sent at once, waits for the start and sees the server
// (none may run with the catalog the session opened with, which has no
// servers yet).
describe("sessions opened before the upstreams started", () => {
  let gateway;
  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), "codemode-early-"));
    const path = join(dir, "gateway.json");
    writeFileSync(path, JSON.stringify({
      tools: { codeMode: { enabled: true, timeoutMs: 5000 } },
      mcpServers: {
        slow: { command: process.execPath, args: [join(here, "servers/slow.mjs")], env: { SLOW_START_MS: "1500" } },
      },
    }));
    gateway = await startHttpGateway(path);
  });
  after(async () => {
    await gateway?.stop();
  });

  test("concurrent first cells all wait for the start and see the server", async () => {
    const sessions = await Promise.all(Array.from({ length: 3 }, () => connectHttp(gateway.url)));
    try {
      const cells = sessions.flatMap((s, i) => Array.from({ length: 8 }, (_, k) =>
        exec(s.client, `return (await MCP.slow.sleep({ ms: 1, tag: "t${i}-${k}" })).content[0].text`)));
      const results = await Promise.all(cells);
      results.forEach((r, n) => {
        assert.equal(r.status, "completed", JSON.stringify(r));
        assert.equal(r.value, `slept t${Math.floor(n / 8)}-${n % 8}`);
      });
    } finally {
      await Promise.all(sessions.map((s) => s.close()));
    }
  });
});
