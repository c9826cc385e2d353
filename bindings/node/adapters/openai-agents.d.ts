import type { FunctionTool } from "@openai/agents";
import type { CodeMode } from "../index.js";

/** `[exec, wait]` as function tools of an Agent (each returns the result union as JSON text). */
export declare function codeModeTools(codeMode: CodeMode): Promise<FunctionTool<unknown, any, string>[]>;
