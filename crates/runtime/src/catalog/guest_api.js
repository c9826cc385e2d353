// The product's guest API: the globals a cell sees besides the engine's own
// (`text`, `json`): `yield_control`, `API`, and per run `ALL_TOOLS`, `tools`,
// `MCP`, `namespaces` and each visible plugin namespace's global. The runtime owns this file (crate::guest_api) and
// hands it to the sandbox as `SandboxConfig::guest_api`; the sandbox's
// engine prelude calls it once, before the base image is baked, with a
// narrow bridge and calls the function it returns once per run with the run
// context (`{tools, conveniences, mcp}`, built by crate::guest_api).
//
// Every method name sent here is a `crate::guest_api::Method` (a test pins
// the two lists together). Nothing here is a security boundary: the host
// re-validates every request against the run's real catalog. State stays
// unreachable from cell code (closures, null-prototype objects, intrinsics
// captured before any cell runs).
(function (bridge) {
  "use strict";
  const { hostRequest, idRequest, defineGlobal } = bridge;
  const {
    isArray,
    freeze,
    defineProperty,
    createObject,
    TypeErrorCtor,
    ErrorCtor,
    StringCtor,
    parseJson,
  } = bridge.intrinsics;
  const WeakSetCtor = WeakSet;
  const promiseThen = Promise.prototype.then;
  const ProxyCtor = Proxy;
  const hasOwn = Object.prototype.hasOwnProperty;
  const getOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
  const preventExtensions = Object.preventExtensions;
  const isExtensible = Object.isExtensible;

  function yield_control(reason) {
    const r = reason === undefined ? null : StringCtor(reason);
    return hostRequest("yield", { reason: r }).then(() => undefined);
  }

  defineGlobal("yield_control", yield_control);

  // progress(value, total?, message?): tells whoever follows the exec/wait
  // (an MCP client with a progress token) how far the cell is.
  function progress(value, total, message) {
    return hostRequest("progress", {
      value: value,
      total: total === undefined ? null : total,
      message: message === undefined || message === null ? null : StringCtor(message),
    }).then(() => undefined);
  }
  defineGlobal("progress", progress);

  // ---- large results by handle ---------------------------------------------
  // A nested result larger than the runtime's handle size stays on the
  // host; the call resolves to a handle the cell reads in slices.
  const HANDLE_KEY = "$codemodeResultHandle";
  // Set per run from the host's context: only descriptors carrying it are
  // handles (a tool's own JSON cannot know it).
  let handleNonce = null;
  const handles = new WeakSetCtor();
  const addHandle = WeakSetCtor.prototype.add;
  const hasHandle = WeakSetCtor.prototype.has;
  function resultHandle(descriptor) {
    const id = descriptor[HANDLE_KEY];
    const handle = createObject(null);
    handle.bytes = descriptor.bytes;
    handle.textBytes = descriptor.textBytes;
    handle.text = named("text", function (start, end) {
      return hostRequest("handle.text", {
        id: id,
        start: start === undefined ? null : start,
        end: end === undefined ? null : end,
      });
    });
    handle.find = named("find", function (needle, from) {
      return hostRequest("handle.find", { id: id, needle: needle, from: from === undefined ? null : from });
    });
    handle.json = named("json", function () {
      return hostRequest("handle.json", { id: id });
    });
    freeze(handle);
    addHandle.call(handles, handle);
    return handle;
  }
  /** `promise`, resolving to a handle where the host sent one. */
  function handled(promise) {
    return promiseThen.call(promise, maybeHandle);
  }
  function maybeHandle(value) {
    return value !== null && typeof value === "object" && !isArray(value) &&
      typeof value[HANDLE_KEY] === "number" && handleNonce !== null && value.nonce === handleNonce
      ? resultHandle(value)
      : value;
  }

  // unwrap(result): what a tool result means, without the MCP envelope:
  // `structuredContent` when present, else the JSON of a single text item
  // (or its text when it is not JSON), else the joined text of text-only
  // content, else the content array. A result with `isError` throws.
  function textOf(item) {
    return item !== null && typeof item === "object" && item.type === "text" && typeof item.text === "string"
      ? item.text
      : undefined;
  }
  function unwrap(result) {
    if (result !== null && typeof result === "object" && hasHandle.call(handles, result)) {
      throw new TypeErrorCtor("unwrap(result): this result is a handle (" + result.bytes + " bytes, kept on the host); read it with result.text(start, end), result.find(needle) or result.json()");
    }
    if (result === null || typeof result !== "object" || isArray(result)) {
      throw new TypeErrorCtor("unwrap(result) takes an MCP tool result ({ content, structuredContent?, isError? }), got " + describeArgument(result));
    }
    const content = isArray(result.content) ? result.content : [];
    const texts = [];
    for (let i = 0; i < content.length; i++) {
      const text = textOf(content[i]);
      if (text !== undefined) texts.push(text);
    }
    if (result.isError === true) {
      const error = new ErrorCtor("the tool reported an error: " + (texts.length ? texts.join("\n") : "(no message)"));
      error.code = "nested_tool_failed";
      throw error;
    }
    if (result.structuredContent !== undefined && result.structuredContent !== null) return result.structuredContent;
    if (content.length === 1 && texts.length === 1) {
      try {
        return parseJson(texts[0]);
      } catch (_) {
        return texts[0];
      }
    }
    if (texts.length > 0 && texts.length === content.length) return texts.join("\n");
    return content;
  }
  defineGlobal("unwrap", unwrap);

  // ---- the run's catalog (ALL_TOOLS, tools) -------------------------------
  // The host passes the run context with the cell (cm_run). Nothing here is
  // trusted by the host: search, describe and call are bridge requests the
  // host re-validates against the run's real catalog.
  function search(query, options) {
    return hostRequest("search", { query: query, options: options });
  }
  function describe(id) {
    return hostRequest("describe", { id: id });
  }
  function callTool(id, input) {
    return handled(hostRequest("call", { id: id, input: input }));
  }

  function describeArgument(value) {
    if (value === null) return "null";
    if (isArray(value)) return "an array";
    return typeof value === "object" ? "an object" : "a " + typeof value;
  }

  function rejected(error) {
    return Promise.reject(error);
  }

  /** The one object argument of an MCP function (none means {}). */
  function objectArgument(label, args, required) {
    if (args.length > 1) {
      return new TypeErrorCtor(label + " takes exactly one object argument ({ ... }), got " + args.length + " arguments");
    }
    const input = args.length === 0 ? undefined : args[0];
    if (input === undefined || input === null) {
      return required ? new TypeErrorCtor(label + " takes one object argument like " + required) : null;
    }
    if (typeof input !== "object" || isArray(input)) {
      return new TypeErrorCtor(label + " takes one object argument like " + (required || "{ key: value }") + ", got " + describeArgument(input));
    }
    return undefined;
  }

  function mcpTool(label, id) {
    const send = idRequest("mcp.call", id);
    return function () {
      const problem = objectArgument(label, arguments, null);
      if (problem) return rejected(problem);
      return handled(send(arguments.length === 0 ? null : arguments[0]));
    };
  }

  function mcpRequest(serverName, op, label, required) {
    return function () {
      const problem = objectArgument(label, arguments, required);
      if (problem) return rejected(problem);
      return handled(hostRequest("mcp.request", { server: serverName, op: op, input: arguments.length === 0 ? null : arguments[0] }));
    };
  }

  function named(name, fn) {
    defineProperty(fn, "name", { value: name, configurable: true });
    return fn;
  }

  // A server's tools become functions when first read, not when the run
  // starts: the context names every tool of every server, and building a
  // closure per tool cost every exec about 5 µs per tool (1 ms at 200
  // tools) when a cell calls two. The server is a proxy over an extensible
  // target that gains each tool's function on first read; keys, `in` and
  // descriptors answer from the context's list, and writes are refused as
  // on a frozen object.
  function mcpServer(entry) {
    const serverName = entry[0];
    // The tool list is JSON text, parsed on first use: most cells touch
    // one or two of a run's servers.
    const listText = entry[1];
    const prefix = "MCP." + serverName;
    const target = createObject(null);
    const fixed = createObject(null);
    fixed.$api = named("$api", function (toolName, options) {
      return hostRequest("mcp.api", { server: serverName, tool: toolName === undefined ? null : toolName, options: options === undefined ? null : options });
    });
    const flags = entry[2] | 0;
    if (flags & 1) {
      const resources = createObject(null);
      resources.list = named("list", mcpRequest(serverName, "resources.list", prefix + ".resources.list", null));
      resources.read = named("read", mcpRequest(serverName, "resources.read", prefix + ".resources.read", "{ uri: \"...\" }"));
      resources.templates = named("templates", mcpRequest(serverName, "resources.templates", prefix + ".resources.templates", null));
      fixed.resources = freeze(resources);
    }
    if (flags & 2) {
      const prompts = createObject(null);
      prompts.list = named("list", mcpRequest(serverName, "prompts.list", prefix + ".prompts.list", null));
      prompts.get = named("get", mcpRequest(serverName, "prompts.get", prefix + ".prompts.get", "{ name: \"...\", arguments: { ... } }"));
      fixed.prompts = freeze(prompts);
    }
    // name → id and the key order (tools in catalog order, then the fixed
    // members, which win over a tool of the same name), made on first use.
    let ids = null;
    let keys = null;
    function index() {
      if (ids !== null) return;
      ids = createObject(null);
      keys = [];
      let list = [];
      try { list = typeof listText === "string" ? parseJson(listText) : []; } catch (_) {}
      if (!isArray(list)) list = [];
      for (let i = 0; i < list.length; i++) {
        const name = list[i][0];
        if (typeof name !== "string" || hasOwn.call(ids, name) || hasOwn.call(fixed, name)) continue;
        ids[name] = list[i][1];
        keys.push(name);
      }
      for (const name in fixed) keys.push(name);
    }
    function member(key) {
      if (hasOwn.call(target, key)) return target[key];
      let value;
      if (hasOwn.call(fixed, key)) value = fixed[key];
      else {
        index();
        if (!hasOwn.call(ids, key)) return undefined;
        value = named(key, mcpTool(prefix + "." + key, ids[key]));
      }
      defineProperty(target, key, { value: value, writable: false, enumerable: true, configurable: true });
      return value;
    }
    function has(key) {
      if (typeof key !== "string") return false;
      if (hasOwn.call(fixed, key)) return true;
      index();
      return hasOwn.call(ids, key);
    }
    function refuse() { return false; }
    return new ProxyCtor(target, freeze({
      get: function (_, key) {
        if (has(key)) return member(key);
        if (isProbe(key)) return undefined;
        return missingCall(serverName, key);
      },
      has: function (_, key) { return has(key); },
      ownKeys: function () { index(); return keys.slice(); },
      getOwnPropertyDescriptor: function (_, key) {
        if (!has(key)) return undefined;
        member(key);
        return getOwnPropertyDescriptor(target, key);
      },
      set: refuse,
      defineProperty: function (_, key, descriptor) {
        // Only what Object.freeze asks after preventExtensions: the same
        // member, made non-configurable and read-only.
        if (isExtensible(target) || !hasOwn.call(target, key)) return false;
        if (("value" in descriptor && descriptor.value !== target[key]) ||
            descriptor.writable === true || descriptor.configurable === true ||
            "get" in descriptor || "set" in descriptor) return false;
        defineProperty(target, key, descriptor);
        return true;
      },
      deleteProperty: refuse,
      setPrototypeOf: refuse,
      preventExtensions: function () {
        // Object.freeze(server): every tool becomes real first, so the
        // target's keys are exactly the ones reported.
        index();
        for (let i = 0; i < keys.length; i++) member(keys[i]);
        preventExtensions(target);
        return true;
      },
    }));
  }

  // ---- names the run does not have -----------------------------------------
  // `MCP.<server>.<tool>` of a tool (or server) the run does not have is a
  // placeholder function whose call rejects with a coded error naming the
  // nearest names (answered by the host from the run's catalog), instead
  // of a bare "not a function". `"name" in MCP` and `Object.keys` still
  // show only what exists. Names the engine and common idioms probe on any
  // object (`then`, `toJSON`, symbols, ...) and `resources`/`prompts` of a
  // server without them stay undefined.
  const PROBES = createObject(null);
  const probeNames = ["then", "catch", "finally", "toJSON", "constructor", "prototype", "__proto__",
    "toString", "toLocaleString", "valueOf", "inspect", "hasOwnProperty", "isPrototypeOf",
    "propertyIsEnumerable", "$$typeof", "asymmetricMatch", "nodeType", "tagName", "length", "name",
    "call", "apply", "bind", "default", "__esModule",
    // Present only when the server offers them: feature-tested with typeof.
    "resources", "prompts"];
  for (let i = 0; i < probeNames.length; i++) PROBES[probeNames[i]] = true;
  freeze(PROBES);
  function isProbe(key) {
    return typeof key !== "string" || PROBES[key] === true;
  }
  function missingCall(serverName, toolName) {
    return named(toolName, function () {
      return hostRequest("mcp.missing", { server: serverName, tool: toolName });
    });
  }
  function guardedServer(serverName, server) {
    return new ProxyCtor(server, freeze({
      get: function (target, key) {
        if (hasOwn.call(target, key) || isProbe(key)) return target[key];
        return missingCall(serverName, key);
      },
    }));
  }
  function missingServer(serverName) {
    return guardedServer(serverName, freeze(createObject(null)));
  }
  function guardedRoot(mcp) {
    return new ProxyCtor(mcp, freeze({
      get: function (target, key) {
        if (hasOwn.call(target, key) || isProbe(key)) return target[key];
        return missingServer(key);
      },
    }));
  }

  // ---- plugin namespaces ---------------------------------------------------
  // The host serializes each visible namespace's scope into a tree:
  // {j: json} data, {o: [[key, node]...]} objects, {a: [node...]} arrays and
  // {f: path} callables. A callable sends its namespace id, its path and
  // the arguments; the host resolves them (anything forged is refused).
  function nsFunction(nsId, path) {
    const dot = path.lastIndexOf(".");
    return named(dot < 0 ? path : path.slice(dot + 1), function () {
      const args = [];
      for (let i = 0; i < arguments.length; i++) args.push(arguments[i] === undefined ? null : arguments[i]);
      return handled(hostRequest("ns.call", { ns: nsId, path: path, args: args }));
    });
  }

  function nsNode(nsId, node) {
    if (node === null || typeof node !== "object") return undefined;
    if (typeof node.f === "string") return nsFunction(nsId, node.f);
    if (isArray(node.a)) {
      const out = [];
      for (let i = 0; i < node.a.length; i++) out.push(nsNode(nsId, node.a[i]));
      return freeze(out);
    }
    if (isArray(node.o)) {
      const out = createObject(null);
      for (let i = 0; i < node.o.length; i++) out[node.o[i][0]] = nsNode(nsId, node.o[i][1]);
      return freeze(out);
    }
    return node.j;
  }

  function installRunGlobals(ctx) {
    const valid = ctx !== null && typeof ctx === "object";
    handleNonce = valid && typeof ctx.handleNonce === "string" ? ctx.handleNonce : null;
    const entries = valid && isArray(ctx.tools) ? ctx.tools : [];
    const all = [];
    for (let i = 0; i < entries.length; i++) all.push(freeze(entries[i]));
    defineGlobal("ALL_TOOLS", freeze(all));
    const catalog = createObject(null);
    catalog.search = search;
    catalog.describe = describe;
    catalog.call = callTool;
    const conveniences = valid && isArray(ctx.conveniences) ? ctx.conveniences : [];
    for (let i = 0; i < conveniences.length; i++) {
      const name = conveniences[i][0];
      const id = conveniences[i][1];
      if (name === "search" || name === "describe" || name === "call") continue;
      const send = idRequest("call", id);
      catalog[name] = { [name](input) { return handled(send(input)); } }[name];
    }
    defineGlobal("tools", freeze(catalog));
    const mcp = createObject(null);
    const servers = valid && isArray(ctx.mcp) ? ctx.mcp : [];
    for (let i = 0; i < servers.length; i++) mcp[servers[i][0]] = mcpServer(servers[i]);
    defineGlobal("MCP", guardedRoot(freeze(mcp)));
    const spaces = createObject(null);
    const visible = valid && isArray(ctx.namespaces) ? ctx.namespaces : [];
    for (let i = 0; i < visible.length; i++) {
      const globalName = visible[i][0];
      const value = nsNode(visible[i][1], visible[i][2]);
      spaces[globalName] = value;
      defineGlobal(globalName, value);
    }
    defineGlobal("namespaces", freeze(spaces));
  }

  // The virtual declaration files (answered by the host from the run's
  // catalog; nothing is on disk).
  const api = createObject(null);
  api.list = named("list", function (prefix) {
    return hostRequest("api.list", { prefix: prefix === undefined ? null : prefix });
  });
  api.read = named("read", function (path, options) {
    return hostRequest("api.read", {
      path: path === undefined ? null : path,
      options: options === undefined ? null : options,
    });
  });
  // API.search(query, { limit?, server? }): ranked MCP tools across the
  // run's servers, each with its call path and a short signature.
  api.search = named("search", function (query, options) {
    return hostRequest("api.search", { query: query, options: options === undefined ? null : options });
  });
  defineGlobal("API", freeze(api));

  return function install(ctx) {
    installRunGlobals(ctx);
  };
})
