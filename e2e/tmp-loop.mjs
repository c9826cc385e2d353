import { writeFileSync, mkdtempSync } from "node:fs"; import { join } from "node:path"; import { tmpdir } from "node:os";
import { connectStdio, exec, servers } from "./harness.mjs";
const dir = mkdtempSync(join(tmpdir(), "cx-"));
const p = join(dir, "b.json"); writeFileSync(p, JSON.stringify({ tools: { codeMode: { enabled: true } }, mcpServers: { everything: { command: process.execPath, args: [servers.everything] }, memory: { command: process.execPath, args: [servers.memory] } } }));
const { client, close } = await connectStdio(p);
const until = Date.now() + Number(process.argv[2] ?? 15000);
while (Date.now() < until) await exec(client, "return 1");
await close();
