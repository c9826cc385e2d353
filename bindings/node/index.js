// codemode for Node.js: the runtime in-process. Cells run in a QuickJS VM
// compiled to WebAssembly inside this process (wasmtime, in the native
// addon); your tools are plain JS functions the cells call through the
// runtime. See README.md in this package and docs/node.md in the repository.
import native from "./native.js";

const SOURCES = new Set(["client", "plugin", "openclaw"]);

/** The id the runtime gives a tool: `<source>:<owner>:<name>`. */
function toolId(tool) {
  return `${tool.source ?? "client"}:${tool.owner ?? "app"}:${tool.name}`;
}

function checkTools(tools) {
  if (!Array.isArray(tools)) {
    throw new TypeError("CodeMode: options.tools must be an array of { name, description, inputSchema, execute }");
  }
  const byId = new Map();
  tools.forEach((tool, i) => {
    const where = `CodeMode: options.tools[${i}]`;
    if (tool === null || typeof tool !== "object") throw new TypeError(`${where} must be an object`);
    if (typeof tool.name !== "string" || tool.name === "") throw new TypeError(`${where}.name must be a non-empty string`);
    if (typeof tool.execute !== "function") throw new TypeError(`${where} (${tool.name}).execute must be a function (input, ctx) => result`);
    if (tool.source !== undefined && !SOURCES.has(tool.source)) {
      throw new TypeError(`${where} (${tool.name}).source must be "client", "plugin" or "openclaw"; MCP tools come from mcpServers`);
    }
    for (const field of ["description", "owner"]) {
      if (tool[field] !== undefined && typeof tool[field] !== "string") throw new TypeError(`${where} (${tool.name}).${field} must be a string`);
    }
    for (const field of ["inputSchema", "annotations"]) {
      if (tool[field] !== undefined && (tool[field] === null || typeof tool[field] !== "object" || Array.isArray(tool[field]))) {
        throw new TypeError(`${where} (${tool.name}).${field} must be an object`);
      }
    }
    if (tool.needsApproval !== undefined && typeof tool.needsApproval !== "boolean") {
      throw new TypeError(`${where} (${tool.name}).needsApproval must be a boolean`);
    }
    const id = toolId(tool);
    if (byId.has(id)) throw new TypeError(`${where}: a tool with id ${id} is already defined`);
    byId.set(id, tool);
  });
  return byId;
}

function message(error) {
  if (error instanceof Error) return error.message;
  return String(error);
}

/** A tool's answer: `{ ok }`, `{}` or `{ error }`. */
async function toolAnswer(byId, call) {
  const tool = byId.get(call.toolId);
  if (!tool) return { error: `no JavaScript tool ${call.toolId}` };
  let value;
  try {
    value = await tool.execute(call.input, {
      callId: call.callId,
      parentCallId: call.parentCallId,
      toolId: call.toolId,
      context: call.context,
    });
  } catch (e) {
    return { error: message(e) };
  }
  return value === undefined ? {} : { ok: value };
}

/** `approve(request)` → true | false | { deny: reason } | undefined (decide later). */
async function approvalAnswer(approve, request) {
  const answer = await approve(request);
  if (answer === true) return { decision: "approve" };
  if (answer === false) return { decision: "deny", reason: "denied" };
  if (answer === undefined || answer === null) return { decision: "later" };
  if (typeof answer === "object" && typeof answer.deny === "string") return { decision: "deny", reason: answer.deny };
  return { decision: "invalid", answer: String(answer) };
}

/** `beforeToolCall(event)` → undefined (allow) | { block: reason } | { input }. */
async function hookAnswer(beforeToolCall, event) {
  const answer = await beforeToolCall(event);
  if (answer === undefined || answer === null) return { allow: true };
  if (typeof answer === "object" && "block" in answer) return { block: String(answer.block) };
  if (typeof answer === "object" && "input" in answer) return { rewrite: answer.input };
  return { invalid: String(answer) };
}

/**
 * Answers the runtime's requests (tool calls, approvals, hooks): JSON in,
 * the answer back by `completeRequest`. A callback that throws answers
 * `{ error }`, which fails closed (the call fails, is denied, is blocked).
 */
function dispatcher(byId, approve, beforeToolCall) {
  const answer = async (kind, request) => {
    switch (kind) {
      case "tool":
        return toolAnswer(byId, request);
      case "approve":
        return approvalAnswer(approve, request);
      case "hook":
        return hookAnswer(beforeToolCall, request);
      default:
        return { error: `unknown request kind ${kind}` };
    }
  };
  return (json) => {
    const { token, kind, ...request } = JSON.parse(json);
    answer(kind, request).then(
      (result) => {
        let text;
        try {
          text = JSON.stringify(result);
        } catch (e) {
          text = JSON.stringify({ error: `the tool's result is not JSON: ${message(e)}` });
        }
        native.completeRequest(token, text);
      },
      (e) => native.completeRequest(token, JSON.stringify({ error: message(e) })),
    );
  };
}

function progress(onProgress) {
  if (typeof onProgress !== "function") return undefined;
  return (json) => {
    try {
      onProgress(JSON.parse(json));
    } catch {
      // A failing progress callback must not fail the run.
    }
  };
}

/**
 * Code mode in-process: `exec` and `wait` for a model, your tools and MCP
 * servers hidden behind them.
 */
export class CodeMode {
  #native = null;
  #opening;
  #closed = false;
  #onProgress;

  /** Starts opening at once; `await cm.ready()` (or use `CodeMode.create`) to see errors early. */
  constructor(options = {}) {
    const { tools = [], scripted, mcpServers, config, store, agentId, sessionId, owner, approve, beforeToolCall, onProgress } = options;
    const byId = checkTools(tools);
    for (const [name, fn] of Object.entries({ approve, beforeToolCall, onProgress })) {
      if (fn !== undefined && typeof fn !== "function") throw new TypeError(`CodeMode: options.${name} must be a function`);
    }
    if (config !== undefined && (config === null || typeof config !== "object")) {
      throw new TypeError("CodeMode: options.config must be an object (the tools.codeMode settings)");
    }
    if (mcpServers !== undefined && (mcpServers === null || typeof mcpServers !== "object" || Array.isArray(mcpServers))) {
      throw new TypeError("CodeMode: options.mcpServers must be an object { name: server }");
    }
    if (scripted !== undefined && !Array.isArray(scripted)) {
      throw new TypeError("CodeMode: options.scripted must be an array of scripted tools ({ source, name, result | echoInput | error, delayMs? })");
    }
    this.#onProgress = onProgress;
    const definitions = [...byId.values()].map(({ execute: _execute, ...definition }) => definition);
    const document = { tools: { codeMode: config ?? {} }, mcpServers: mcpServers ?? {} };
    const json = JSON.stringify({ document, tools: definitions, scripted, store, agentId, sessionId, owner, host: "node" });
    this.#opening = native
      .open(json, dispatcher(byId, approve, beforeToolCall), approve !== undefined, beforeToolCall !== undefined)
      .then((n) => {
        this.#native = n;
        if (this.#closed) n.close();
        return n;
      });
    // Seen by ready()/exec(); not an unhandled rejection meanwhile.
    this.#opening.catch(() => {});
  }

  /** Opens a CodeMode and waits until its MCP servers answered. */
  static async create(options) {
    const cm = new CodeMode(options);
    await cm.ready();
    return cm;
  }

  /** Resolves once the session is open (its MCP servers started or failed). */
  async ready() {
    await this.#opening;
  }

  async #session() {
    if (this.#closed) throw new Error("CodeMode: this instance is closed");
    return this.#opening;
  }

  #ready() {
    if (this.#native === null) {
      throw new Error("CodeMode is still starting: await cm.ready() first, or create it with await CodeMode.create(...)");
    }
    return this.#native;
  }

  /** Runs a cell. Resolves to the result union (`completed`, `waiting`, `failed`); never rejects for the cell's own errors. */
  async exec(input, options = {}) {
    if (input === null || typeof input !== "object") throw new TypeError("CodeMode.exec: expected { code, language? }");
    const n = await this.#session();
    const onProgress = progress(options.onProgress ?? this.#onProgress);
    return JSON.parse(await n.exec(JSON.stringify(input), options.callId, onProgress));
  }

  /** Resumes a waiting run: `{ runId }`. */
  async wait(input, options = {}) {
    if (input === null || typeof input !== "object") throw new TypeError("CodeMode.wait: expected { runId }");
    const n = await this.#session();
    const onProgress = progress(options.onProgress ?? this.#onProgress);
    return JSON.parse(await n.wait(JSON.stringify(input), options.callId, onProgress));
  }

  /** The exact `exec` and `wait` tool definitions to give a model: `[{ name, description, inputSchema }]`. */
  surface() {
    return JSON.parse(this.#ready().surface());
  }

  /** The hidden catalog's tool ids (for you, not the model). */
  catalog() {
    return this.#ready().catalogIds();
  }

  /** Config warnings and MCP servers that did not start. */
  diagnostics() {
    return this.#ready().diagnostics();
  }

  /** Calls waiting for a decision (`approve` answered undefined, or none was given). */
  pendingApprovals() {
    return JSON.parse(this.#ready().pendingApprovals());
  }

  /** Approves a waiting call; the next `wait` sees it run. */
  approve(runId, callId) {
    this.#ready().approve(runId, callId);
  }

  /** Denies a waiting call: the cell sees `approval_denied` with `reason`. */
  deny(runId, callId, reason = "denied") {
    this.#ready().deny(runId, callId, reason);
  }

  /** Ends the session: running cells are aborted, MCP servers stopped. Idempotent. */
  async close() {
    if (this.#closed) return;
    this.#closed = true;
    try {
      const n = await this.#opening;
      n.close();
    } catch {
      // It never opened: nothing to close.
    }
  }
}

export default CodeMode;
