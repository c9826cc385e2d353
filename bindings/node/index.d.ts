// Types of the `codemode` package: the in-process runtime. The result
// union is the contract of docs/results-and-errors.md in the codemode repository.

/** JSON as it crosses between a cell and your tools. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Who and where a run is (what hooks and tools see). */
export interface RunContext {
  agentId?: string;
  sessionId?: string;
  sessionKey?: string;
  runId?: string;
  sender?: string;
  channel?: string;
}

/** What a tool's `execute` gets besides its input. */
export interface ToolCallContext {
  /** This nested call's id (unique within the run). */
  callId: string;
  /** The model's call id of the `exec` that started the run. */
  parentCallId: string;
  /** The tool's catalog id, `<source>:<owner>:<name>`. */
  toolId: string;
  context: RunContext;
}

/** One of your tools. The model never sees it directly: cells find it with `tools.search` and call `tools.<name>(input)`. */
export interface Tool<Input = any> {
  name: string;
  description?: string;
  /** JSON Schema of the input (checked by the runtime before `execute` runs). */
  inputSchema?: Record<string, unknown>;
  /** Called for each nested call; throwing or rejecting fails that call as a tool error (the cell can catch it). The value must be JSON. */
  execute: (input: Input, ctx: ToolCallContext) => unknown | Promise<unknown>;
  /** MCP-style annotations (`readOnlyHint`, `destructiveHint`, ...); the approval policy reads them. */
  annotations?: Record<string, unknown>;
  /** Ask `approve` (or wait for `cm.approve`) before each call. */
  needsApproval?: boolean;
  /** Default `"client"`. */
  source?: "client" | "plugin" | "openclaw";
  /** Default `"app"`. */
  owner?: string;
}

/** A call that needs a human's decision. */
export interface ApprovalRequest {
  callId: string;
  parentCallId: string;
  toolId: string;
  tool: string;
  /** Why it is held (the policy's reason). */
  reason: string;
  /** The input, redacted and bounded. */
  inputSummary: string;
  context: RunContext;
}

/** `true` runs the call, `false` or `{ deny }` refuses it, `undefined` leaves it waiting for `cm.approve`/`cm.deny`. */
export type ApprovalAnswer = boolean | { deny: string } | undefined | null;

/** What `beforeToolCall` sees. */
export interface ToolCallEvent {
  /** `tool`, `mcp_request` or `code_mode_exec`. */
  toolKind: string;
  toolId: string;
  toolInputKind?: string;
  callId: string;
  parentCallId?: string;
  context: RunContext;
  input: Json;
}

/** `undefined` allows, `{ block }` refuses (the cell sees `approval_denied`), `{ input }` goes on with a new input. */
export type HookAnswer = undefined | null | { block: string } | { input: Json };

export type ProgressEvent =
  | { kind: "callStarted"; callId: string; toolId: string }
  | { kind: "callFinished"; callId: string; toolId: string; ok: boolean }
  | { kind: "call"; callId: string; toolId: string; progress: number; total: number | null; message: string | null }
  | { kind: "cell"; progress: number; total: number | null; message: string | null };

/** `tools.codeMode` of the gateway config (docs/configuration.md); unknown keys are reported by `diagnostics()`. */
export interface CodeModeConfig {
  timeoutMs?: number;
  memoryLimitBytes?: number;
  maxOutputBytes?: number;
  maxPendingToolCalls?: number;
  maxQueuedToolCalls?: number;
  snapshotTtlSeconds?: number;
  searchDefaultLimit?: number;
  [key: string]: unknown;
}

/** One upstream MCP server, as in the gateway config's `mcpServers`. */
export type McpServerConfig =
  | { command: string; args?: string[]; env?: Record<string, string>; cwd?: string; [key: string]: unknown }
  | { url: string; headers?: Record<string, string>; [key: string]: unknown };

/** A tool the runtime answers itself, without calling JS (tests, mocks, demos): the `--tools` file format of `codemode exec`. */
export interface ScriptedTool {
  source: "client" | "plugin" | "openclaw";
  name: string;
  owner?: string;
  description?: string;
  parameters?: Record<string, unknown>;
  /** Exactly one of result, echoInput, error. */
  result?: Json;
  echoInput?: true;
  error?: string;
  delayMs?: number;
  needsApproval?: boolean;
}

export interface CodeModeOptions {
  tools?: Tool[];
  scripted?: ScriptedTool[];
  mcpServers?: Record<string, McpServerConfig>;
  config?: CodeModeConfig;
  /** Where waiting runs are kept: `"memory"` (default), `"file:PATH"` or `"redis://HOST:PORT/DB"`. */
  store?: string;
  agentId?: string;
  sessionId?: string;
  /** Who the runs belong to across processes (durable stores); default: this OS user. */
  owner?: string;
  approve?: (request: ApprovalRequest) => ApprovalAnswer | Promise<ApprovalAnswer>;
  beforeToolCall?: (event: ToolCallEvent) => HookAnswer | Promise<HookAnswer>;
  onProgress?: (event: ProgressEvent) => void;
}

export interface ExecInput {
  code: string;
  language?: "javascript" | "typescript";
}

export interface WaitInput {
  runId: string;
}

export interface CallOptions {
  /** The model's tool-call id (default: generated). */
  callId?: string;
  onProgress?: (event: ProgressEvent) => void;
}

/** The receipt of one nested call. */
export interface CallReceipt {
  id: string;
  toolId: string;
  outcome: "ok" | "failed" | "denied" | "cancelled" | "unknown";
}

/** A nested call still in flight when the run suspended. */
export interface PendingToolCall {
  id: string;
  toolId: string;
  method: string;
  awaitingApproval?: true;
  inputSummary?: string;
}

export interface Telemetry {
  language: "javascript" | "typescript";
  durationMs: number;
  execCount: number;
  waitCount: number;
  [key: string]: unknown;
}

export type Output = { type: "text"; text: string } | { type: "json"; value: unknown };

/** The result union (docs/results-and-errors.md): `exec` and `wait` resolve to it; a cell's own errors are `failed`, never a rejection. */
export type CodeModeResult =
  | {
      status: "completed";
      value: unknown;
      output?: Output[];
      nestedCalls?: CallReceipt[];
      nestedCallsOmitted?: number;
      telemetry: Telemetry;
    }
  | {
      status: "waiting";
      runId: string;
      reason: "pending_tools" | "yield" | "approval";
      pendingToolCalls?: PendingToolCall[];
      output?: Output[];
      nestedCalls?: CallReceipt[];
      nestedCallsOmitted?: number;
      telemetry: Telemetry;
    }
  | {
      status: "failed";
      error: string;
      code?: string;
      output?: Output[];
      nestedCalls?: CallReceipt[];
      nestedCallsOmitted?: number;
      telemetry: Telemetry;
    };

/** A model-visible tool: exactly `exec` and `wait`. */
export interface ModelTool {
  name: "exec" | "wait";
  description: string;
  inputSchema: Record<string, unknown>;
}

export interface PendingApproval {
  runId: string | null;
  callId: string;
  toolId: string;
  reason: string;
  inputSummary: string;
  context: RunContext;
}

export declare class CodeMode {
  constructor(options?: CodeModeOptions);
  /** Opens one and waits until its MCP servers answered (or failed: see `diagnostics()`). */
  static create(options?: CodeModeOptions): Promise<CodeMode>;
  ready(): Promise<void>;
  exec(input: ExecInput, options?: CallOptions): Promise<CodeModeResult>;
  wait(input: WaitInput, options?: CallOptions): Promise<CodeModeResult>;
  /** The exact `exec` and `wait` definitions to give a model (after `ready()`). */
  surface(): ModelTool[];
  catalog(): string[];
  diagnostics(): string[];
  pendingApprovals(): PendingApproval[];
  approve(runId: string, callId: string): void;
  deny(runId: string, callId: string, reason?: string): void;
  close(): Promise<void>;
}

export default CodeMode;
