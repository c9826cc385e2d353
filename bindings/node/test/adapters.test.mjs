// The framework adapters, driven by each framework's own agent loop with a
// scripted model (no network): the model calls `exec` with a cell that
// calls two of the user's JS tools and yields, then `wait` with the runId
// it reads from that result, then answers with the run's value.
import { test } from "node:test";
import assert from "node:assert/strict";
import { CodeMode } from "codemode";

const CELL = `
  const a = await tools.add({ a: 19, b: 2 });
  await yield_control();
  return await tools.multiply({ a, b: 2 });`;

function userTools(calls) {
  return [
    {
      name: "add",
      description: "Add two numbers",
      inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
      execute: async ({ a, b }) => { calls.push("add"); return a + b; },
    },
    {
      name: "multiply",
      description: "Multiply two numbers",
      inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
      execute: async ({ a, b }) => { calls.push("multiply"); return a * b; },
    },
  ];
}

/** The run id in the last tool result the model was sent (any framework's message shape). */
function runIdIn(text) {
  const m = /run_[0-9a-f]{32}/.exec(text);
  assert.ok(m, `no runId in what the model saw: ${text.slice(0, 400)}`);
  return m[0];
}

function valueIn(text) {
  const m = /\\?"value\\?":(\d+)/.exec(text);
  assert.ok(m, `no value in what the model saw: ${text.slice(0, 400)}`);
  return Number(m[1]);
}

test("AI SDK 7: generateText's tool loop runs exec, then wait, and ends with the cell's value", async () => {
  const { generateText, stepCountIs } = await import("ai");
  const { MockLanguageModelV4 } = await import("ai/test");
  const { codeModeTools } = await import("codemode/ai");
  const calls = [];
  const cm = await CodeMode.create({ tools: userTools(calls) });
  const usage = {
    inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: 1, text: 1, reasoning: 0 },
  };
  const toolCall = (id, name, input) => ({
    content: [{ type: "tool-call", toolCallId: id, toolName: name, input: JSON.stringify(input) }],
    finishReason: { unified: "tool-calls", raw: "tool_calls" },
    usage,
    warnings: [],
  });
  let step = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (options) => {
      step += 1;
      const seen = JSON.stringify(options.prompt);
      if (step === 1) {
        assert.deepEqual(options.tools.map((t) => t.name).sort(), ["exec", "wait"]);
        return toolCall("call_exec", "exec", { code: CELL });
      }
      if (step === 2) return toolCall("call_wait", "wait", { runId: runIdIn(seen) });
      return {
        content: [{ type: "text", text: `The answer is ${valueIn(seen)}.` }],
        finishReason: { unified: "stop", raw: "stop" },
        usage,
        warnings: [],
      };
    },
  });
  try {
    const result = await generateText({
      model,
      tools: await codeModeTools(cm),
      stopWhen: stepCountIs(5),
      prompt: "Add 19 and 2, then double it.",
    });
    assert.equal(result.text, "The answer is 42.");
    assert.equal(step, 3);
    assert.deepEqual(calls, ["add", "multiply"]);
    const results = result.steps.flatMap((s) => s.toolResults);
    assert.equal(results[0].output.status, "waiting");
    assert.equal(results[1].output.status, "completed");
    assert.equal(results[1].output.value, 42);
  } finally {
    await cm.close();
  }
});

test("OpenAI Agents SDK: an Agent's run loop runs exec, then wait, and ends with the cell's value", async () => {
  const { Agent, Runner, Usage } = await import("@openai/agents");
  const { codeModeTools } = await import("codemode/openai-agents");
  const calls = [];
  const cm = await CodeMode.create({ tools: userTools(calls) });
  let step = 0;
  const functionCall = (callId, name, input) => ({
    output: [{ type: "function_call", callId, name, arguments: JSON.stringify(input), status: "completed" }],
    usage: new Usage(),
  });
  const model = {
    async getResponse(request) {
      step += 1;
      const seen = JSON.stringify(request.input);
      if (step === 1) {
        assert.deepEqual(request.tools.map((t) => t.name).sort(), ["exec", "wait"]);
        return functionCall("call_exec", "exec", { code: CELL });
      }
      if (step === 2) return functionCall("call_wait", "wait", { runId: runIdIn(seen) });
      return {
        output: [{
          type: "message", role: "assistant", status: "completed", id: "msg_1",
          content: [{ type: "output_text", text: `The answer is ${valueIn(seen)}.` }],
        }],
        usage: new Usage(),
      };
    },
    async *getStreamedResponse() {
      throw new Error("not used");
    },
  };
  try {
    const agent = new Agent({ name: "worker", instructions: "Use exec.", model, tools: await codeModeTools(cm) });
    const runner = new Runner({ tracingDisabled: true });
    const result = await runner.run(agent, "Add 19 and 2, then double it.");
    assert.equal(result.finalOutput, "The answer is 42.");
    assert.equal(step, 3);
    assert.deepEqual(calls, ["add", "multiply"]);
  } finally {
    await cm.close();
  }
});
