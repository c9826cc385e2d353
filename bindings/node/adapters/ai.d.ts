import type { Tool } from "ai";
import type { CodeMode, CodeModeResult, ExecInput, WaitInput } from "../index.js";

/** `{ exec, wait }` for `generateText`/`streamText`/`ToolLoopAgent`: the model sees exactly these two. */
export declare function codeModeTools(codeMode: CodeMode): Promise<{
  exec: Tool<ExecInput, CodeModeResult>;
  wait: Tool<WaitInput, CodeModeResult>;
}>;
