// Compiled by `tsc --strict --noEmit` in the test project (cargo xtask
// test-npm): the declarations describe the API as the tests use it, and
// misuse is a type error (each @ts-expect-error must fail to compile).
import { CodeMode, type CodeModeResult, type Tool, type ApprovalRequest, type ToolCallEvent } from "codemode";
import { codeModeTools as aiTools } from "codemode/ai";
import { codeModeTools as agentTools } from "codemode/openai-agents";
import { generateText, stepCountIs, type LanguageModel } from "ai";
import { Agent } from "@openai/agents";

const add: Tool<{ a: number; b: number }> = {
  name: "add",
  description: "Add two numbers",
  inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } } },
  execute: async ({ a, b }, ctx) => {
    const id: string = ctx.toolId;
    return id ? a + b : 0;
  },
  needsApproval: false,
};

export async function typed(model: LanguageModel): Promise<number> {
  const cm = await CodeMode.create({
    tools: [add],
    config: { timeoutMs: 5000, maxPendingToolCalls: 32 },
    mcpServers: { everything: { command: "node", args: ["server.js"] } },
    store: "memory",
    approve: async (request: ApprovalRequest) => (request.toolId.startsWith("client:") ? true : { deny: "no" }),
    beforeToolCall: (event: ToolCallEvent) => (event.toolKind === "tool" ? undefined : { block: "only tools" }),
    onProgress: (event) => {
      if (event.kind === "cell") console.log(event.progress, event.message);
    },
  });
  const names: ("exec" | "wait")[] = cm.surface().map((t) => t.name);
  const r: CodeModeResult = await cm.exec({ code: "return 1", language: "typescript" }, { callId: "c1" });
  let n = names.length;
  switch (r.status) {
    case "completed":
      n += Number(r.value);
      break;
    case "waiting": {
      const reason: "pending_tools" | "yield" | "approval" = r.reason;
      const next = await cm.wait({ runId: r.runId });
      n += next.status === "failed" ? next.error.length + reason.length : 0;
      break;
    }
    case "failed":
      n += r.error.length + (r.code ?? "").length;
      break;
  }
  for (const pending of cm.pendingApprovals()) {
    if (pending.runId) cm.approve(pending.runId, pending.callId);
  }
  const { text } = await generateText({ model, tools: await aiTools(cm), stopWhen: stepCountIs(5), prompt: "hi" });
  const agent = new Agent({ name: "a", instructions: "use exec", tools: await agentTools(cm) });
  // @ts-expect-error: exec needs { code }
  await cm.exec({ source: "return 1" });
  // @ts-expect-error: language is javascript or typescript
  await cm.exec({ code: "1", language: "python" });
  // @ts-expect-error: a tool needs execute
  new CodeMode({ tools: [{ name: "x" }] });
  await cm.close();
  return n + text.length + agent.name.length;
}
