// The Vercel AI SDK (`ai` 7): code mode's `exec` and `wait` as AI SDK tools.
//
//   import { generateText, stepCountIs } from "ai";
//   import { CodeMode } from "codemode";
//   import { codeModeTools } from "codemode/ai";
//   const cm = await CodeMode.create({ tools: [...] });
//   const { text } = await generateText({ model, tools: await codeModeTools(cm), stopWhen: stepCountIs(10), prompt });
import { jsonSchema, tool } from "ai";

/** `{ exec, wait }` for `generateText`/`streamText`/`ToolLoopAgent`: the model sees exactly these two. */
export async function codeModeTools(codeMode) {
  await codeMode.ready();
  const tools = {};
  for (const definition of codeMode.surface()) {
    const run = definition.name === "exec" ? codeMode.exec.bind(codeMode) : codeMode.wait.bind(codeMode);
    tools[definition.name] = tool({
      description: definition.description,
      inputSchema: jsonSchema(definition.inputSchema),
      // The result union goes back to the model as it is (status, value or
      // error, runId to wait on).
      execute: async (input, { toolCallId }) => run(input, { callId: toolCallId }),
    });
  }
  return tools;
}
