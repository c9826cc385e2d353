// Soak under hostile load: `codemode serve --http` with real upstreams,
// normal client sessions doing ordinary work while hostile sessions send
// CPU loops, memory bombs, output floods, describe bombs, deep nesting,
// huge inputs, VM-slot and run-slot floods, crash an upstream every few
// seconds, and disconnect mid-exec; every client authenticates (normal
// sessions as four principals, hostile ones as two others), hostile
// stateless 2026-07-28 clients flood the gateway with requests that each
// leave a run waiting, and hostile Tasks clients (the extension declared)
// start tasks whose cells yield forever and never collect them. Then the
// restart: every normal session leaves a run waiting (one on a call still
// running), the gateway is SIGKILLed and started again on the same run
// store, and the sessions reconnect and resume their runs. Run by
// `cargo xtask soak`.
//
// Usage: CODEMODE_BIN=... node soak.mjs [SECONDS] [--check]
// Prints one JSON object with the figures; with --check exits 1 when a
// correctness bound fails (lost results, failed normal cells, leaked
// processes or runs).
import { setMaxListeners } from "node:events";
import { readFileSync, readdirSync } from "node:fs";
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Client as StatelessClient, StreamableHTTPClientTransport as StatelessTransport } from "@modelcontextprotocol/client";
import { BIN, servers } from "./harness.mjs";

const args = process.argv.slice(2);
const SECONDS = Number(args.find((a) => /^\d+$/.test(a)) ?? 60);
const CHECK = args.includes("--check");
const NORMAL = 32;
const HOSTILE = 8;
const STATELESS_FLOODERS = 2;
const TASK_FLOODERS = 2;
/** Bearer tokens: normal sessions take one of four principals, hostile ones
 * one of two others. */
const token = (who) => `${who}-soak-token-0123456789abcdef`;
const NORMAL_PRINCIPALS = ["n0", "n1", "n2", "n3"];
const HOSTILE_PRINCIPALS = ["h0", "h1"];

function config() {
  const dir = mkdtempSync(join(tmpdir(), "codemode-soak-"));
  const path = join(dir, "gateway.json");
  store = `file:${join(dir, "runs.db")}`;
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs: 2000, snapshotTtlSeconds: 20, maxOutputBytes: 65536 } },
    auth: { bearerTokens: [...NORMAL_PRINCIPALS, ...HOSTILE_PRINCIPALS].map((name) => ({ name, token: token(name) })) },
    mcpServers: {
      everything: { command: process.execPath, args: [servers.everything] },
      flaky: { command: process.execPath, args: [servers.flaky], timeoutMs: 10000 },
    },
  }));
  return path;
}

/** The run store the gateway and its restart share. */
let store;

async function startGateway(path, port = 0) {
  const child = spawn(BIN, ["serve", "--config", path, "--http", `127.0.0.1:${port}`, "--store", store], {
    env: { ...process.env, CODEMODE_LOG: "info" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the gateway did not start:\n${log}`)), 60000);
    child.stderr.on("data", (chunk) => {
      log += chunk;
      if (log.length > 1 << 22) log = log.slice(-(1 << 20));
      const m = /serving MCP at (http:\/\/\S+\/mcp)\n/.exec(log);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    child.on("exit", (code) => reject(new Error(`the gateway exited with ${code}:\n${log}`)));
  });
  const exited = new Promise((resolve) => child.on("exit", resolve));
  return { child, url, exited, log: () => log };
}

async function connect(url, who) {
  const client = new Client({ name: "codemode-soak", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { authorization: `Bearer ${token(who)}` } },
  });
  await client.connect(transport);
  return { client, transport };
}

function resultOf(response) {
  return response.structuredContent ?? JSON.parse(response.content?.[0]?.text ?? "null");
}

async function execCell(client, code, options) {
  return resultOf(await client.callTool({ name: "exec", arguments: { code } }, undefined, options));
}

function percentile(values, p) {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** Descendant pids of `pid` (from /proc). */
function descendants(pid) {
  const parents = new Map();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      parents.set(Number(entry), ppid);
    } catch { /* gone */ }
  }
  const out = [];
  const walk = (p) => { for (const [child, parent] of parents) if (parent === p) { out.push(child); walk(child); } };
  walk(pid);
  return out;
}

function peakRssMiB(pid) {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
    return Math.round(kb / 1024);
  } catch { return null; }
}

const NORMAL_CELL = `
  const sum = await MCP.everything.getSum({ a: 20, b: 22 });
  text("sum " + JSON.stringify(sum.content?.[0]?.text ?? sum));
  const hits = await tools.search("sum", { limit: 2 }).catch(() => []);
  return { ok: true, n: hits.length };`;

const HOSTILE_CELLS = [
  ["cpu", "for (;;) {}"],
  ["memory", "const a = []; for (;;) a.push('x'.repeat(1 << 20));"],
  ["output", "for (let i = 0; ; i++) text('y'.repeat(4096));"],
  ["describe_bomb", "for (;;) await tools.describe('z'.repeat(1000)).catch(() => 0);"],
  ["deep", "// import\nreturn " + "[".repeat(1500) + "1" + "]".repeat(1500)],
  ["huge_input", "return await MCP.everything.echo({ message: 'h'.repeat(2 << 20) }).catch(e => e.message.length);"],
  ["vm_flood", "return await MCP.flaky.slow({ ms: 3000 });"],
  ["run_flood", "globalThis.keep = 'k'.repeat(200000); await yield_control(); return 1;"],
  ["crash_upstream", "return await MCP.flaky.crash({}).catch(e => e.code);"],
];

async function normalWorker(url, until, latencies, failures, lost, who) {
  const { client, transport } = await connect(url, who);
  while (Date.now() < until) {
    const started = performance.now();
    try {
      const r = await execCell(client, NORMAL_CELL);
      latencies.push(performance.now() - started);
      if (r?.status !== "completed") {
        const key = r?.code ?? r?.status ?? "unknown";
        failures[key] = (failures[key] ?? 0) + 1;
        (failures.samples ??= []).length < 3 && failures.samples.push(String(r?.error ?? JSON.stringify(r)).slice(0, 500));
      }
    } catch (e) {
      lost.push(String(e?.message ?? e));
    }
  }
  await transport.terminateSession().catch(() => {});
  await client.close();
}

async function hostileWorker(url, until, index, codes) {
  let round = 0;
  while (Date.now() < until) {
    const { client, transport } = await connect(url, HOSTILE_PRINCIPALS[index % HOSTILE_PRINCIPALS.length]);
    const [name, code] = HOSTILE_CELLS[(index + round) % HOSTILE_CELLS.length];
    round += 1;
    const count = name === "vm_flood" || name === "run_flood" ? 24 : 1;
    const controller = new AbortController();
    setMaxListeners(64, controller.signal);
    // Every third round disconnects mid-exec.
    const disconnect = round % 3 === 0;
    const calls = Array.from({ length: count }, () =>
      execCell(client, code, { signal: controller.signal, timeout: 30000 })
        .then((r) => { const k = `${name}:${r?.status === "failed" ? r.code ?? "no_code" : r?.status}`; codes[k] = (codes[k] ?? 0) + 1; })
        .catch(() => { const k = `${name}:client_gone`; codes[k] = (codes[k] ?? 0) + 1; }));
    if (disconnect) {
      await new Promise((r) => setTimeout(r, 300));
      controller.abort();
    }
    await Promise.all(calls);
    await transport.terminateSession().catch(() => {});
    await client.close().catch(() => {});
  }
}

/** A stateless (2026-07-28) client flooding the gateway: every request a
 * fresh handler, each leaving a run waiting that nobody resumes. */
async function statelessFlooder(url, until, index, codes) {
  const client = new StatelessClient({ name: "codemode-soak-stateless", version: "1.0.0" }, {
    versionNegotiation: { mode: { pin: "2026-07-28" } },
  });
  const who = HOSTILE_PRINCIPALS[index % HOSTILE_PRINCIPALS.length];
  await client.connect(new StatelessTransport(new URL(url), {
    requestInit: { headers: { authorization: `Bearer ${token(who)}` } },
  }));
  while (Date.now() < until) {
    try {
      const r = resultOf(await client.callTool({ name: "exec", arguments: { code: "globalThis.keep = 's'.repeat(50000); await yield_control(); return 1;" } }));
      const k = `stateless_flood:${r?.status === "failed" ? r.code ?? "no_code" : r?.status}`;
      codes[k] = (codes[k] ?? 0) + 1;
    } catch {
      codes["stateless_flood:client_error"] = (codes["stateless_flood:client_error"] ?? 0) + 1;
    }
  }
  await client.close().catch(() => {});
}

/** A Tasks client (2026-07-28, the tasks extension declared): each exec
 * becomes a task the gateway drives; its cell yields forever and the
 * client never collects it (this SDK cannot read a task result). */
async function taskFlooder(url, until, index, codes) {
  const client = new StatelessClient({ name: "codemode-soak-tasks", version: "1.0.0" }, {
    versionNegotiation: { mode: { pin: "2026-07-28" } },
    capabilities: { extensions: { "io.modelcontextprotocol/tasks": {} } },
  });
  const who = HOSTILE_PRINCIPALS[index % HOSTILE_PRINCIPALS.length];
  await client.connect(new StatelessTransport(new URL(url), {
    requestInit: { headers: { authorization: `Bearer ${token(who)}` } },
  }));
  while (Date.now() < until) {
    let k;
    try {
      const r = resultOf(await client.callTool({ name: "exec", arguments: { code: "for (;;) await yield_control();" } }));
      k = `task_flood:${r?.status === "failed" ? r.code ?? "no_code" : r?.status}`;
    } catch (e) {
      k = /result type 'task'/.test(String(e?.message)) ? "task_flood:task_created" : "task_flood:client_error";
    }
    codes[k] = (codes[k] ?? 0) + 1;
  }
  await client.close().catch(() => {});
}

async function phase(url, seconds, hostile) {
  const until = Date.now() + seconds * 1000;
  const latencies = [], failures = {}, lost = [], codes = {};
  const workers = [];
  for (let i = 0; i < NORMAL; i++) {
    workers.push(normalWorker(url, until, latencies, failures, lost, NORMAL_PRINCIPALS[i % NORMAL_PRINCIPALS.length]));
  }
  if (hostile) {
    for (let i = 0; i < HOSTILE; i++) workers.push(hostileWorker(url, until, i, codes));
    for (let i = 0; i < STATELESS_FLOODERS; i++) workers.push(statelessFlooder(url, until, i, codes));
    for (let i = 0; i < TASK_FLOODERS; i++) workers.push(taskFlooder(url, until, i, codes));
  }
  await Promise.all(workers);
  return {
    normalCells: latencies.length,
    p50Ms: Math.round(percentile(latencies, 50) * 10) / 10,
    p99Ms: Math.round(percentile(latencies, 99) * 10) / 10,
    normalFailures: failures,
    lost: lost.length,
    lostSamples: lost.slice(0, 3),
    hostileOutcomes: codes,
  };
}

/** Every normal session leaves a run waiting (a value on its heap; every
 * fourth on a call still running), then the gateway is SIGKILLed and
 * started again on the same store and port; the sessions reconnect and
 * resume their runs. Returns the next gateway and the figures. */
async function restart(gateway, path) {
  const port = new URL(gateway.url).port;
  const sessions = await Promise.all(NORMAL_PRINCIPALS.flatMap((who) =>
    Array.from({ length: NORMAL / NORMAL_PRINCIPALS.length }, () => who)).map(async (who, i) => {
    const { client, transport } = await connect(gateway.url, who);
    const running = i % 4 === 3;
    const code = running
      ? `globalThis.n = ${i}; return await MCP.flaky.slow({ ms: 600000 }).then(() => "ran", (e) => e.code);`
      : `globalThis.n = ${i}; await yield_control(); return n * 2;`;
    const started = await execCell(client, code);
    await client.close().catch(() => {});
    return { who, i, running, started, transport };
  }));
  const waiting = sessions.filter((s) => s.started?.status === "waiting");
  gateway.child.kill("SIGKILL");
  await gateway.exited;
  const killedAt = performance.now();
  const next = await startGateway(path, port);
  const servingMs = performance.now() - killedAt;
  const resumeMs = [], wrong = [];
  let resumed = 0, interrupted = 0;
  await Promise.all(waiting.map(async (s) => {
    const { client, transport } = await connect(next.url, s.who);
    const started = performance.now();
    try {
      let r = resultOf(await client.callTool({ name: "wait", arguments: { runId: s.started.runId } }));
      for (let k = 0; r?.status === "waiting" && k < 10; k++) {
        r = resultOf(await client.callTool({ name: "wait", arguments: { runId: s.started.runId } }));
      }
      resumeMs.push(performance.now() - started);
      const expected = s.running ? "interrupted" : s.i * 2;
      if (r?.status === "completed" && r.value === expected) {
        resumed += 1;
        if (s.running) interrupted += 1;
      } else {
        wrong.push(JSON.stringify(r).slice(0, 300));
      }
    } catch (e) {
      wrong.push(String(e?.message ?? e).slice(0, 300));
    }
    await transport.terminateSession().catch(() => {});
    await client.close().catch(() => {});
  }));
  return {
    gateway: next,
    figures: {
      runsWaitingAtKill: waiting.length,
      runsOfSessions: sessions.length,
      resumedAfterRestart: resumed,
      callsInterrupted: interrupted,
      wrongResumes: wrong.length,
      wrongSamples: wrong.slice(0, 3),
      servingAgainMs: Math.round(servingMs),
      resumeP50Ms: Math.round(percentile(resumeMs, 50) * 10) / 10,
      resumeP99Ms: Math.round(percentile(resumeMs, 99) * 10) / 10,
    },
  };
}

const path = config();
let gateway = await startGateway(path);
const quiet = Math.max(5, Math.round(SECONDS / 4));
const unloaded = await phase(gateway.url, quiet, false);
const loaded = await phase(gateway.url, SECONDS, true);
const restarted = await restart(gateway, path);
gateway = restarted.gateway;
const afterRestart = await phase(gateway.url, quiet, false);
const pid = gateway.child.pid;
// Let in-flight upstream calls finish and crashed upstreams restart.
await new Promise((r) => setTimeout(r, 3000));
const childrenWhileServing = descendants(pid).length;
const peak = peakRssMiB(pid);
gateway.child.kill("SIGINT");
await gateway.exited;
await new Promise((r) => setTimeout(r, 500));
const leftAfterExit = descendants(pid).length;
const log = gateway.log();
const held = /suspended runs held at shutdown: (\d+)/.exec(log);
const figures = {
  seconds: SECONDS,
  normalSessions: NORMAL,
  normalPrincipals: NORMAL_PRINCIPALS.length,
  hostileSessions: HOSTILE,
  hostilePrincipals: HOSTILE_PRINCIPALS.length,
  statelessFlooders: STATELESS_FLOODERS,
  taskFlooders: TASK_FLOODERS,
  unloaded,
  loaded,
  p99Ratio: unloaded.p99Ms ? Math.round((loaded.p99Ms / unloaded.p99Ms) * 100) / 100 : null,
  restart: restarted.figures,
  afterRestart,
  peakRssMiB: peak,
  upstreamProcessesWhileServing: childrenWhileServing,
  processesLeftAfterExit: leftAfterExit,
  suspendedRunsAtShutdown: held ? Number(held[1]) : null,
};
console.log(JSON.stringify(figures, null, 2));
if (CHECK) {
  const problems = [];
  const phases = [unloaded, loaded, afterRestart];
  const lostResults = phases.reduce((n, p) => n + p.lost, 0);
  if (lostResults > 0) problems.push(`${lostResults} results lost`);
  if (phases.some((p) => Object.keys(p.normalFailures).length > 0)) problems.push("normal cells failed");
  const r = restarted.figures;
  if (r.runsWaitingAtKill !== r.runsOfSessions) problems.push(`${r.runsOfSessions - r.runsWaitingAtKill} runs did not wait before the kill`);
  if (r.resumedAfterRestart !== r.runsWaitingAtKill) problems.push(`${r.wrongResumes} runs not resumed as expected after the restart`);
  if (leftAfterExit > 0) problems.push(`${leftAfterExit} processes left after the gateway exited`);
  if (phases.some((p) => p.normalCells === 0)) problems.push("no normal cell completed");
  if (problems.length) {
    console.error(`soak: ${problems.join("; ")}`);
    process.exit(1);
  }
}
