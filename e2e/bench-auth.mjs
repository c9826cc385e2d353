// What auth and metrics cost, measured from a real MCP client (the
// official TypeScript SDK) over streamable HTTP, side by side in one run:
// the 50-upstream-call cell of bench.mjs (server-everything's get-sum over
// stdio) on
//   - before: a gateway binary without auth and metrics
//     (CODEMODE_BIN_BEFORE), no token;
//   - after: this build (CODEMODE_BIN) with `auth.bearerTokens`, every
//     request carrying its token, metrics recorded.
// Rounds alternate between the two so both see the same machine. Besides
// the two medians, the script reports the median of the paired per-round
// differences (each round runs both sides back to back, so a slow moment
// of the machine hits both) with a bootstrap 95 % interval: the cost is
// within the target when the interval's upper end is.
// Usage: CODEMODE_BIN=target/release/codemode CODEMODE_BIN_BEFORE=/path/to/old \
//        node e2e/bench-auth.mjs [rounds]
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FIFTY_SUMS as cell, connectHttp, exec, servers, startHttpGateway } from "./harness.mjs";

const rounds = Number(process.argv[2] ?? 200);
const before = process.env.CODEMODE_BIN_BEFORE;
if (!before) throw new Error("set CODEMODE_BIN_BEFORE to the binary to compare with");
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p90 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)];
const TOKEN = "bench-token-0123456789abcdef0123";

function config(auth) {
  const dir = mkdtempSync(join(tmpdir(), "codemode-bench-auth-"));
  const path = join(dir, "gateway.json");
  writeFileSync(path, JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs: 10000 } },
    ...(auth ? { auth: { bearerTokens: [{ name: "bench", token: TOKEN }] } } : {}),
    mcpServers: { everything: { command: process.execPath, args: [servers.everything] } },
  }));
  return path;
}

const old = await startHttpGateway(config(false), { bin: before });
// BENCH_AFTER_NO_AUTH=1 leaves auth out of the second gateway too (to tell
// what auth costs from what the rest of the build costs).
const afterAuth = process.env.BENCH_AFTER_NO_AUTH !== "1";
const now = await startHttpGateway(config(afterAuth));
const oldClient = await connectHttp(old.url);
const nowClient = await connectHttp(now.url, afterAuth ? { headers: { Authorization: `Bearer ${TOKEN}` } } : {});
for (let i = 0; i < 20; i++) {
  for (const c of [oldClient, nowClient]) {
    const r = await exec(c.client, cell);
    if (r.value !== 1275) throw new Error(JSON.stringify(r));
  }
}
const times = { before: [], after: [] };
for (let i = 0; i < rounds; i++) {
  const order = i % 2 ? [["before", oldClient], ["after", nowClient]] : [["after", nowClient], ["before", oldClient]];
  for (const [name, c] of order) {
    const t = performance.now();
    const r = await exec(c.client, cell);
    times[name].push(performance.now() - t);
    if (r.value !== 1275) throw new Error(JSON.stringify(r));
  }
}
await oldClient.close();
await nowClient.close();
await old.stop();
await now.stop();
const b = median(times.before);
const a = median(times.after);
const paired = times.after.map((t, i) => t - times.before[i]);
// Bootstrap: resample the rounds, take the median paired difference.
let seed = 42;
const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const medians = [];
for (let k = 0; k < 2000; k++) {
  const sample = paired.map(() => paired[Math.floor(random() * paired.length)]);
  medians.push(median(sample));
}
medians.sort((x, y) => x - y);
const percent = (ms) => Math.round((ms / b) * 1000) / 10;
console.log(JSON.stringify({
  rounds,
  beforeMs: { median: b, p90: p90(times.before) },
  afterMs: { median: a, p90: p90(times.after) },
  addedPercent: ((a - b) / b) * 100,
  pairedMedianPercent: percent(median(paired)),
  pairedMedian95PercentInterval: [percent(medians[50]), percent(medians[1949])],
}, null, 2));
