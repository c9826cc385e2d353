// The OpenAI Agents SDK for JavaScript (`@openai/agents`): code mode's
// `exec` and `wait` as function tools of an Agent.
//
//   import { Agent, run } from "@openai/agents";
//   import { CodeMode } from "codemode";
//   import { codeModeTools } from "codemode/openai-agents";
//   const cm = await CodeMode.create({ tools: [...] });
//   const agent = new Agent({ name: "worker", instructions, tools: await codeModeTools(cm) });
import { tool } from "@openai/agents";

/** `[exec, wait]` as function tools. Non-strict: `exec`'s optional `language` is not a strict-mode schema. */
export async function codeModeTools(codeMode) {
  await codeMode.ready();
  return codeMode.surface().map((definition) => {
    const run = definition.name === "exec" ? codeMode.exec.bind(codeMode) : codeMode.wait.bind(codeMode);
    return tool({
      name: definition.name,
      description: definition.description,
      parameters: definition.inputSchema,
      strict: false,
      execute: async (input, _context, details) => {
        const args = typeof input === "string" ? JSON.parse(input) : input;
        const callId = details?.toolCall?.callId;
        return JSON.stringify(await run(args, callId ? { callId } : {}));
      },
    });
  });
}
