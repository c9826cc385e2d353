// Side-by-side gateway bench (issue: close to the floor). One process, one
// interleaved run, the official TypeScript MCP client over stdio against
// server-everything, three ways:
//   - direct:   the client calls the upstream's tools itself (the floor);
//   - codemode: `codemode serve` with the upstream behind it, default
//               runtime config (no raised limits), cells sent to `exec`;
//   - peer:     a bare quickjs-emscripten sandbox behind a thin MCP server
//               (servers/quickjs-peer.mjs), the same cells.
// Workloads: a trivial exec (`return 1`; direct: one `echo` call), one cell
// of 50 sequential `get-sum` calls, one cell of `Promise.all` over 50, and
// a cold first call on a fresh process (spawn, initialize, one cell with
// one call). Every round runs every system on every workload, the order
// rotating, so drift falls on all. Then the RSS a waiting run costs the
// gateway (`--held 100,1000`; runs held on a slow call, default store).
// Prints medians, p90 and the ratios to direct as JSON and as a Markdown
// table (the one in BENCHMARKS.md).
// Usage: CODEMODE_BIN=target/release/codemode node e2e/bench-gateway.mjs
//          [--rounds 200] [--cold 10] [--held 100,1000] [--only codemode,direct]
//          [--workloads trivial,seq50,all50]
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { parseArgs } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { BIN, FIFTY_SUMS, connectHttp, here, resultOf, servers, startHttpGateway } from "./harness.mjs";

const { values: opts } = parseArgs({
  options: {
    rounds: { type: "string", default: "200" },
    cold: { type: "string", default: "10" },
    held: { type: "string", default: "100" },
    only: { type: "string", default: "direct,codemode,peer" },
    workloads: { type: "string", default: "trivial,seq50,all50" },
  },
});
const rounds = Number(opts.rounds);
const coldRounds = Number(opts.cold);
const heldCounts = opts.held ? opts.held.split(",").filter(Boolean).map(Number) : [];
const only = new Set(opts.only.split(","));

const ALL_FIFTY = `
const rs = await Promise.all(Array.from({ length: 50 }, (_, i) => MCP.everything.getSum({ a: i, b: 1 })));
return rs.reduce((t, r) => t + Number(/is (\\d+)\\./.exec(r.content[0].text)[1]), 0);`;
const ONE_SUM = `return (await MCP.everything.getSum({ a: 1, b: 2 })).content[0].text;`;

function gatewayConfig(extra = {}) {
  const dir = mkdtempSync(join(tmpdir(), "codemode-bench-"));
  const path = join(dir, "gateway.json");
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, ...extra.codeMode } },
    mcpServers: { everything: { command: process.execPath, args: [servers.everything] }, ...extra.servers },
  }));
  return path;
}

/** How each system is started and how it runs each workload. */
const systems = {
  direct: {
    spawn: () => ({ command: process.execPath, args: [servers.everything] }),
    trivial: async (c) => {
      const r = await c.callTool({ name: "echo", arguments: { message: "hi" } });
      if (!r.content[0].text.includes("hi")) throw new Error(JSON.stringify(r));
    },
    seq50: async (c) => {
      let total = 0;
      for (let i = 0; i < 50; i++) {
        const r = await c.callTool({ name: "get-sum", arguments: { a: i, b: 1 } });
        total += Number(/is (\d+)\./.exec(r.content[0].text)[1]);
      }
      if (total !== 1275) throw new Error(`direct total ${total}`);
    },
    all50: async (c) => {
      const rs = await Promise.all(Array.from({ length: 50 }, (_, i) =>
        c.callTool({ name: "get-sum", arguments: { a: i, b: 1 } })));
      const total = rs.reduce((t, r) => t + Number(/is (\d+)\./.exec(r.content[0].text)[1]), 0);
      if (total !== 1275) throw new Error(`direct total ${total}`);
    },
    cold: async (c) => {
      const r = await c.callTool({ name: "get-sum", arguments: { a: 1, b: 2 } });
      if (!r.content[0].text.includes("3")) throw new Error(JSON.stringify(r));
    },
  },
  codemode: {
    spawn: () => ({
      command: BIN,
      args: ["serve", "--config", gatewayConfig()],
      env: { ...process.env, CODEMODE_LOG: "warn", CODEMODE_DATA_DIR: mkdtempSync(join(tmpdir(), "codemode-bench-data-")) },
    }),
    run: async (c, code) => {
      const r = resultOf(await c.callTool({ name: "exec", arguments: { code } }));
      if (r.status !== "completed") throw new Error(JSON.stringify(r));
      return r.value;
    },
  },
  peer: {
    spawn: () => ({ command: process.execPath, args: [join(here, "servers/quickjs-peer.mjs"), `everything=${servers.everything}`] }),
    run: async (c, code) => {
      const r = await c.callTool({ name: "exec", arguments: { code } });
      const parsed = JSON.parse(r.content[0].text);
      if (parsed.status !== "completed") throw new Error(JSON.stringify(parsed));
      return parsed.value;
    },
  },
};
for (const name of ["codemode", "peer"]) {
  const s = systems[name];
  const expect = (want) => (got) => { if (got !== want) throw new Error(`${name}: ${JSON.stringify(got)} ≠ ${want}`); };
  s.trivial = (c) => s.run(c, "return 1").then(expect(1));
  s.seq50 = (c) => s.run(c, FIFTY_SUMS).then(expect(1275));
  s.all50 = (c) => s.run(c, ALL_FIFTY).then(expect(1275));
  s.cold = (c) => s.run(c, ONE_SUM).then(expect("The sum of 1 and 2 is 3."));
}
const names = Object.keys(systems).filter((n) => only.has(n));
const workloads = opts.workloads.split(",").filter(Boolean);

async function connect(name) {
  const client = new Client({ name: "bench-gateway", version: "1" });
  const transport = new StdioClientTransport({ ...systems[name].spawn(), stderr: "inherit" });
  await client.connect(transport);
  return { client, transport };
}

const times = {};
for (const n of names) for (const w of [...workloads, "cold"]) times[`${n}.${w}`] = [];

// Warm clients, then interleaved rounds.
const clients = {};
for (const n of names) clients[n] = (await connect(n)).client;
for (let i = 0; i < 20; i++) for (const n of names) for (const w of workloads) await systems[n][w](clients[n]);
for (let i = 0; i < rounds; i++) {
  for (let k = 0; k < names.length; k++) {
    const n = names[(i + k) % names.length];
    for (const w of workloads) {
      const t = performance.now();
      await systems[n][w](clients[n]);
      times[`${n}.${w}`].push(performance.now() - t);
    }
  }
}
for (const n of names) await clients[n].close();

// Cold: spawn, initialize, one call (codemode: its upstream starts too).
for (let i = 0; i < coldRounds; i++) {
  for (let k = 0; k < names.length; k++) {
    const n = names[(i + k) % names.length];
    const t = performance.now();
    const { client } = await connect(n);
    await systems[n].cold(client);
    times[`${n}.cold`].push(performance.now() - t);
    await client.close();
  }
}

// RSS per waiting run: runs held on a slow call (exec returns `waiting`
// after timeoutMs), with the default store, the gateway's VmRSS before and
// after (runs spread over HTTP sessions; 2.5 s after the last, so the
// reaper has packed them).
const held = {};
if (names.includes("codemode")) {
  for (const count of heldCounts) {
    const config = gatewayConfig({
      codeMode: { timeoutMs: 100 },
      servers: { slow: { command: process.execPath, args: [join(here, "servers/slow.mjs")] } },
    });
    // Over HTTP, so the runs spread over sessions (one session holds at
    // most 256 waiting runs).
    const gateway = await startHttpGateway(config, {
      args: ["--metrics", "127.0.0.1:0", ...(process.env.BENCH_STORE ? ["--store", process.env.BENCH_STORE] : [])],
      env: { CODEMODE_DATA_DIR: mkdtempSync(join(tmpdir(), "codemode-bench-data-")) },
    });
    const sessions = [];
    for (let i = 0; i < Math.ceil(count / 200) + 1; i++) sessions.push(await connectHttp(gateway.url));
    const cell = `const big = "x".repeat(1000); return (await MCP.slow.sleep({ ms: 3600000, tag: "held" })).content[0].text + big.length;`;
    const hold = async (client) => {
      const r = resultOf(await client.callTool({ name: "exec", arguments: { code: cell } }));
      if (r.status !== "waiting") throw new Error(JSON.stringify(r));
    };
    // Warm the process first with one batch of the same concurrency: 16
    // VMs at once take 16 of the engine's warm slots, which stay resident
    // for the next cells whether or not runs wait (a fixed cost, not one
    // per waiting run).
    await Promise.all(Array.from({ length: 16 }, () => hold(sessions[0].client)));
    await new Promise((r) => setTimeout(r, 2500));
    const before = rssKiB(gateway.pid);
    for (let started = 0; started < count; started += 16) {
      const batch = [];
      for (let k = started; k < Math.min(started + 16, count); k++) batch.push(hold(sessions[1 + Math.floor(k / 200)].client));
      await Promise.all(batch);
    }
    // Runs that wait past a second are packed by the reaper.
    await new Promise((r) => setTimeout(r, 2500));
    const after = rssKiB(gateway.pid);
    const metrics = await (await fetch(gateway.metrics)).text();
    const snapshotBytes = Number(/^codemode_store_bytes (\d+)/m.exec(metrics)?.[1]);
    held[count] = {
      rssBeforeKiB: before,
      rssAfterKiB: after,
      perRunKiB: Math.round((after - before) / count),
      snapshotKiBPerRun: Math.round(snapshotBytes / (count + 16) / 1024),
    };
    for (const s of sessions) await s.close();
    await gateway.stop();
  }
}

function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m[1]);
}

const q = (xs, p) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * p)];
const fmt = (x) => Number(x.toFixed(3));
const summary = {};
for (const [key, xs] of Object.entries(times)) {
  if (xs.length) summary[key] = { median: fmt(q(xs, 0.5)), p90: fmt(q(xs, 0.9)), n: xs.length };
}
console.log(JSON.stringify({ rounds, coldRounds, summary, held }, null, 2));

// The Markdown table.
const labels = {
  trivial: "trivial exec (`return 1`); direct: one `echo` call",
  seq50: "one cell, 50 sequential `get-sum` calls",
  all50: "one cell, `Promise.all` of 50 `get-sum` calls (default config)",
  cold: "cold: spawn, initialize, one cell with one call",
};
const cols = names.flatMap((n) => [n]);
const lines = [
  `| workload (ms, median / p90) | ${cols.join(" | ")} | ${names.filter((n) => n !== "direct").map((n) => `${n} ÷ direct`).join(" | ")} |`,
  `|---|${cols.map(() => "---").join("|")}|${names.filter((n) => n !== "direct").map(() => "---").join("|")}|`,
];
for (const w of [...workloads, "cold"]) {
  const cells = names.map((n) => summary[`${n}.${w}`] ? `${summary[`${n}.${w}`].median} / ${summary[`${n}.${w}`].p90}` : "—");
  const ratios = names.filter((n) => n !== "direct").map((n) => {
    const d = summary[`direct.${w}`];
    const s = summary[`${n}.${w}`];
    if (!d || !s) return "—";
    return w === "trivial"
      ? `${(s.median / d.median).toFixed(2)}× (+${(s.median - d.median).toFixed(3)} ms)`
      : `${(s.median / d.median).toFixed(2)}×`;
  });
  lines.push(`| ${labels[w]} | ${cells.join(" | ")} | ${ratios.join(" | ")} |`);
}
for (const [count, h] of Object.entries(held)) {
  const cells = names.map((n) => (n === "codemode" ? `${h.perRunKiB} KiB (snapshot ${h.snapshotKiBPerRun} KiB)` : "—"));
  lines.push(`| RSS per waiting run, ${count} held (default store) | ${cells.join(" | ")} |${names.filter((n) => n !== "direct").map(() => "").join(" |")} |`);
}
console.log("\n" + lines.join("\n"));
