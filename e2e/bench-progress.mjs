// What a progress token costs, measured from the official TypeScript
// client over stdio: the same exec (a cell making five nested calls to
// server-everything's get-sum) with `onprogress` (the SDK then sends a
// progress token) and without, taking turns in every round. Prints the
// medians, p90s and the median of the per-round differences.
// Usage: CODEMODE_BIN=target/release/codemode node e2e/bench-progress.mjs [rounds]
import { connectStdio, resultOf, writeConfig } from "./harness.mjs";

const rounds = Number(process.argv[2] ?? 200);
const cell = `let total = 0;
for (let i = 0; i < 5; i++) total += Number(/is (\\d+)\\./.exec((await MCP.everything.getSum({ a: i, b: 1 })).content[0].text)[1]);
return total;`;

const quantile = (xs, q) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * q)];

const { client, close } = await connectStdio(writeConfig({ timeoutMs: 10000, flaky: false }));
let notified = 0;
async function once(withToken) {
  const options = withToken ? { onprogress: () => { notified++; } } : undefined;
  const t = performance.now();
  const r = resultOf(await client.callTool({ name: "exec", arguments: { code: cell } }, undefined, options));
  const ms = performance.now() - t;
  if (r.status !== "completed" || r.value !== 15) throw new Error(JSON.stringify(r));
  return ms;
}
for (let i = 0; i < 20; i++) { await once(true); await once(false); }
notified = 0;
const withToken = [];
const without = [];
const diffs = [];
for (let i = 0; i < rounds; i++) {
  // Who goes first alternates, so drift falls on both.
  let a, b;
  if (i % 2) { a = await once(true); b = await once(false); }
  else { b = await once(false); a = await once(true); }
  withToken.push(a);
  without.push(b);
  diffs.push(a - b);
}
await close();
const fmt = (x) => Number(x.toFixed(3));
console.log(JSON.stringify({
  rounds,
  withTokenMs: { median: fmt(quantile(withToken, 0.5)), p90: fmt(quantile(withToken, 0.9)) },
  withoutMs: { median: fmt(quantile(without, 0.5)), p90: fmt(quantile(without, 0.9)) },
  pairedMedianDifferenceMs: fmt(quantile(diffs, 0.5)),
  notificationsDuringMeasuredRounds: notified,
}, null, 2));
