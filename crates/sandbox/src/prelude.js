// The engine prelude: evaluated once inside the VM before the base image is
// baked. It receives the guest's native functions (never put on globalThis)
// and the embedder's guest API (`SandboxConfig::guest_api`, a function
// expression), defines the engine's own globals (`text`, `json`), calls the
// guest API once with a narrow bridge, and returns the hooks the guest's ABI
// calls. It knows no request method, catalog or run-context schema: those
// belong to the guest API (in codemode, the runtime crate's guest_api.js).
//
// Nothing here is a security boundary: the host re-validates every byte that
// leaves the VM. The prelude only makes well-behaved cells pleasant and keeps
// its own state unreachable from cell code (closures, null-prototype objects,
// intrinsics captured before any cell runs).
(function (natives, guestApi) {
  "use strict";
  const G = globalThis;
  // Intrinsics captured before any cell runs (a cell may replace the
  // originals; these stay). The guest API gets the common ones through
  // `bridge.intrinsics`.
  const { stringify, parse: parseJson } = JSON;
  const {
    keys: keysOf,
    freeze,
    defineProperty,
    getPrototypeOf,
    create: createObject,
  } = Object;
  const isArray = Array.isArray;
  const isView = ArrayBuffer.isView;
  const [ErrorCtor, TypeErrorCtor, StringCtor, WeakMapCtor] = [Error, TypeError, String, WeakMap];
  const [MapProto, SetProto, DateProto, RegExpProto, PromiseProto] =
    [Map.prototype, Set.prototype, Date.prototype, RegExp.prototype, Promise.prototype];
  const { get: weakMapGet, set: weakMapSet, has: weakMapHas } = WeakMap.prototype;
  const call = Function.prototype.call.bind(Function.prototype.call);
  const mapEntries = MapProto.entries;
  const setValues = SetProto.values;
  const { getTime: dateGetTime, toISOString: dateToISOString } = DateProto;
  const regexpToString = RegExpProto.toString;
  const typedArrayProto = getPrototypeOf(Uint8Array.prototype);
  const request = natives.request;
  const emit = natives.emit;
  const fastJson = natives.fastJson;
  // codemode_abi::MAX_JSON_DEPTH, which the host's parser and the guest's
  // fast encoder use: one limit for every value that leaves the VM (a test
  // in prelude.rs pins this line to it).
  const MAX_DEPTH = 100;
  // Lone UTF-16 surrogates (an emoji cut in half) have no UTF-8 form: text
  // leaving the VM carries U+FFFD in their place, as the host does for JSON.
  const toWellFormed = StringCtor.prototype.toWellFormed;
  const wellFormed = typeof toWellFormed === "function"
    ? (s) => call(toWellFormed, s)
    : (s) => s;

  // Math.random is seeded per run by the host (see the guest's cm_run).
  defineProperty(Math, "random", { value: natives.random, writable: true, configurable: true });

  // ---- JSON adapter -------------------------------------------------------
  // Everything leaving the VM goes through toPlain: the result is made only of
  // null, booleans, finite numbers, strings, arrays and plain objects.
  //
  // Hot path (every tool call input passes here): plain objects and arrays
  // skip the special-type checks, and the path of the value being converted
  // is kept as a stack of keys that is only turned into text for an error.
  const ObjectProto = Object.prototype;
  const ArrayProto = Array.prototype;
  const identifierKey = /^[A-Za-z_$][\w$]*$/;

  function hasProto(value, proto) {
    let p = getPrototypeOf(value);
    while (p !== null) {
      if (p === proto) return true;
      p = getPrototypeOf(p);
    }
    return false;
  }

  function describePath(keys) {
    if (keys.length === 0) return "the value";
    let path = "value";
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i];
      if (typeof key === "number") path += "[" + key + "]";
      else path += identifierKey.test(key) ? "." + key : "[" + stringify(key) + "]";
    }
    return path;
  }

  // keys: the path from the root to `value`; ancestors: the objects on it.
  function toPlain(value, keys, ancestors) {
    switch (typeof value) {
      case "string":
      case "boolean":
        return value;
      case "number":
        return value === value && value !== Infinity && value !== -Infinity ? value : null;
      case "bigint":
        return StringCtor(value);
      case "undefined":
      case "function":
      case "symbol":
        return undefined;
    }
    if (value === null) return null;
    if (ancestors.length > MAX_DEPTH) {
      throw new TypeErrorCtor(describePath(keys) + " nests deeper than " + MAX_DEPTH + " levels");
    }
    if (ancestors.indexOf(value) !== -1) {
      throw new TypeErrorCtor("cannot convert a cyclic structure to JSON: " + describePath(keys) + " refers back to one of its parents");
    }
    ancestors.push(value);
    try {
      return toPlainObject(value, keys, ancestors);
    } finally {
      ancestors.pop();
    }
  }

  /** Converts `value[key]` as the child at `key` of the current path. */
  function child(v, key, keys, ancestors) {
    keys.push(key);
    const plain = toPlain(v, keys, ancestors);
    keys.pop();
    return plain;
  }

  function readProperty(value, key, keys) {
    try {
      return value[key];
    } catch (e) {
      keys.push(key);
      throw new TypeErrorCtor("cannot convert " + describePath(keys) + " to JSON: reading it threw " + safeMessage(e));
    }
  }

  function setKey(out, key, plain) {
    if (key === "__proto__") defineProperty(out, key, { value: plain, enumerable: true, writable: true, configurable: true });
    else out[key] = plain;
  }

  function plainArray(value, keys, ancestors) {
    const out = [];
    const n = value.length;
    for (let i = 0; i < n; i++) {
      out.push(orNull(child(readProperty(value, i, keys), i, keys, ancestors)));
    }
    return out;
  }

  function plainObject(value, keys, ancestors) {
    const out = {};
    const names = keysOf(value);
    for (let i = 0; i < names.length; i++) {
      const key = names[i];
      const plain = child(readProperty(value, key, keys), key, keys, ancestors);
      if (plain !== undefined) setKey(out, key, plain);
    }
    return out;
  }

  function applyToJSON(value, toJSON, keys, ancestors) {
    let replaced;
    try {
      replaced = call(toJSON, value, "");
    } catch (e) {
      throw new TypeErrorCtor("cannot convert " + describePath(keys) + " to JSON: its toJSON() threw " + safeMessage(e));
    }
    return toPlain(replaced, keys, ancestors);
  }

  function toPlainObject(value, keys, ancestors) {
    const proto = getPrototypeOf(value);
    if (proto === ObjectProto || proto === null || proto === ArrayProto) {
      const toJSON = readProperty(value, "toJSON", keys);
      if (typeof toJSON === "function") return applyToJSON(value, toJSON, keys, ancestors);
      return proto === ArrayProto && isArray(value) ? plainArray(value, keys, ancestors) : plainObject(value, keys, ancestors);
    }
    if (hasProto(value, DateProto)) {
      const t = call(dateGetTime, value);
      return t === t ? call(dateToISOString, value) : null;
    }
    if (hasProto(value, MapProto)) {
      const entries = [];
      let allKeysPrimitive = true;
      for (const [k, v] of call(mapEntries, value)) {
        if (k !== null && (typeof k === "object" || typeof k === "function")) allKeysPrimitive = false;
        entries.push([k, v]);
      }
      if (allKeysPrimitive) {
        const out = {};
        for (const [k, v] of entries) {
          const key = StringCtor(k);
          const plain = child(v, key, keys, ancestors);
          if (plain !== undefined) setKey(out, key, plain);
        }
        return out;
      }
      return entries.map(([k, v], i) => {
        keys.push(i);
        const pair = [orNull(child(k, 0, keys, ancestors)), orNull(child(v, 1, keys, ancestors))];
        keys.pop();
        return pair;
      });
    }
    if (hasProto(value, SetProto)) {
      const out = [];
      let i = 0;
      for (const v of call(setValues, value)) {
        out.push(orNull(child(v, i++, keys, ancestors)));
      }
      return out;
    }
    if (hasProto(value, RegExpProto)) return call(regexpToString, value);
    if (hasProto(value, PromiseProto)) return "[Promise: await it to get its value]";
    if (isView(value) && hasProto(value, typedArrayProto)) {
      const out = [];
      for (let i = 0; i < value.length; i++) out.push(child(value[i], i, keys, ancestors));
      return out;
    }
    if (value instanceof ArrayBuffer) return {};
    if (hasProto(value, ErrorCtor.prototype)) {
      return { name: StringCtor(readProperty(value, "name", keys)), message: StringCtor(readProperty(value, "message", keys)) };
    }
    const toJSON = readProperty(value, "toJSON", keys);
    if (typeof toJSON === "function") return applyToJSON(value, toJSON, keys, ancestors);
    if (isArray(value)) return plainArray(value, keys, ancestors);
    return plainObject(value, keys, ancestors);
  }

  function orNull(v) {
    return v === undefined ? null : v;
  }

  /** JSON text of `value` after the adapter; top-level undefined is null. */
  function encode(value) {
    const fast = fastJson(value, ObjectProto, ArrayProto);
    return fast !== undefined ? fast : stringify(orNull(toPlain(value, [], [])));
  }

  function safeMessage(e) {
    try {
      if (e !== null && typeof e === "object" && "message" in e) {
        return StringCtor(e.name || "Error") + ": " + StringCtor(e.message);
      }
      return StringCtor(e);
    } catch (_) {
      return "an unprintable value";
    }
  }

  // ---- output -------------------------------------------------------------
  function textOf(value) {
    if (typeof value === "string") return value;
    if (value === undefined) return "undefined";
    if (typeof value === "function" || typeof value === "symbol") return StringCtor(value);
    return encode(value);
  }

  function text(value) {
    emit(0, wellFormed(textOf(value)));
  }

  function json(value) {
    emit(1, encode(value));
  }

  // ---- host requests ------------------------------------------------------
  // Errors the host made (rejected tool calls) -> their contract code, so an
  // uncaught one fails the cell with that code. Cell code cannot reach it.
  const hostErrorCodes = new WeakMapCtor();

  /** Starts host work and returns a promise the host settles later.
   * `method` is always a constant of the guest API (no quoting). */
  function hostRequest(method, params) {
    const fast = fastJson(params, ObjectProto, ArrayProto);
    const payload = fast !== undefined
      ? '{"method":"' + method + '","params":' + fast + "}"
      : stringify({ method: method, params: orNull(toPlain(params, [], [])) });
    // The guest keeps the promise's resolve/reject natively; cm_settle
    // resolves it with the host's JSON, or calls `reject` below.
    return request(payload);
  }

  /** A request to `method` for a host-given catalog `id` with `input`:
   * the JSON text before the input is built once per function, not per
   * call (the hot path of conveniences and MCP tools). */
  function idRequest(method, id) {
    const prefix = '{"method":"' + method + '","params":{"id":' + stringify(id) + ',"input":';
    return function (input) {
      const fast = fastJson(input === undefined ? null : input, ObjectProto, ArrayProto);
      return fast !== undefined ? request(prefix + fast + "}}") : hostRequest(method, { id: id, input: input });
    };
  }

  function defineGlobal(name, value) {
    defineProperty(G, name, { value: value, writable: false, enumerable: false, configurable: false });
  }
  defineGlobal("text", text);
  defineGlobal("json", json);

  // ---- the guest API --------------------------------------------------------
  // Called once, here, before any cell exists: it defines its globals and
  // returns `install(context)`, called once per run with the run context
  // (host-made JSON, parsed here) before the cell body starts. The bridge is
  // all it gets of the engine: requests out, how to define a global, and
  // intrinsics captured before any cell could replace them.
  const bridge = createObject(null);
  bridge.hostRequest = hostRequest;
  bridge.idRequest = idRequest;
  bridge.defineGlobal = defineGlobal;
  bridge.intrinsics = freeze({
    __proto__: null,
    isArray,
    freeze,
    defineProperty,
    createObject,
    ErrorCtor,
    TypeErrorCtor,
    StringCtor,
    parseJson,
  });
  const install = guestApi(freeze(bridge));
  if (typeof install !== "function") {
    throw new TypeErrorCtor("the guest API must return its install(context) function");
  }

  // Module loading and host objects do not exist here; make the usual names
  // fail clearly instead of with "x is not defined".
  function denied(name) {
    return function () {
      throw new ErrorCtor(name + " is not available in code mode: there is no module loader, filesystem or network. Call tools instead.");
    };
  }
  defineGlobal("require", denied("require()"));
  defineGlobal("fetch", denied("fetch()"));
  for (const name of ["process", "Deno", "Bun", "os", "std"]) {
    if (name in G) delete G[name];
  }

  // ---- hooks for the guest ABI -------------------------------------------
  const RUNNING = 0, DONE = 1, FAILED = 2;
  let state = DONE;
  let result = null;

  function errorInfo(e) {
    const info = { name: "Error", message: "" };
    try {
      if (e !== null && typeof e === "object" && hasProto(e, ErrorCtor.prototype)) {
        info.name = StringCtor(e.name);
        info.message = StringCtor(e.message);
        if (call(weakMapHas, hostErrorCodes, e)) info.code = call(weakMapGet, hostErrorCodes, e);
        const stack = typeof e.stack === "string" ? e.stack : "";
        // The first cell frame, skipping the constructors of an Error
        // subclass: the model wants the line that threw, not `super(...)`.
        let ctorName = "";
        try { ctorName = typeof e.constructor === "function" ? StringCtor(e.constructor.name) : ""; } catch (_) {}
        const frame = /at (?:(\S+) )?\(?cell\.js:(\d+)(?::(\d+))?/g;
        let m, first = null;
        while ((m = frame.exec(stack)) !== null) {
          if (first === null) first = m;
          if (!(ctorName && m[1] === ctorName)) { first = m; break; }
        }
        if (first) {
          info.line = +first[2];
          if (first[3]) info.column = +first[3];
        } else if (typeof e.lineNumber === "number" && e.fileName === "cell.js") {
          info.line = e.lineNumber;
          if (typeof e.columnNumber === "number") info.column = e.columnNumber;
        }
      } else {
        info.message = "uncaught " + (e === null ? "null" : typeof e) + ": " + textOf(e);
      }
    } catch (inner) {
      info.message = "uncaught value that could not be described (" + safeMessage(inner) + ")";
    }
    return info;
  }

  return {
    run(cell, syntaxError, contextText) {
      if (typeof cell !== "function") {
        state = FAILED;
        result = syntaxError;
        return;
      }
      install(parseJson(contextText));
      state = RUNNING;
      result = null;
      cell().then(
        (value) => { state = DONE; result = value; },
        (error) => { state = FAILED; result = error; },
      );
    },
    /** A host rejection: a plain Error (with the host's code) for `rejectFn`. */
    reject(rejectFn, payload) {
      {
        let message = "host request failed";
        let code = null;
        try {
          const data = parseJson(payload);
          if (data !== null && typeof data === "object" && typeof data.message === "string") {
            message = data.message;
            if (typeof data.code === "string") code = data.code;
          } else if (typeof data === "string") message = data;
        } catch (_) {}
        const error = new ErrorCtor(message);
        if (code !== null) {
          defineProperty(error, "code", { value: code, enumerable: true, writable: true, configurable: true });
          call(weakMapSet, hostErrorCodes, error, code);
        }
        rejectFn(error);
      }
    },
    status() {
      if (state === RUNNING) return 2;
      if (state === FAILED) return [1, stringify(errorInfo(result))];
      try {
        return [0, encode(result)];
      } catch (e) {
        return [1, stringify({ name: "TypeError", message: "the returned value cannot be converted to JSON: " + safeMessage(e) })];
      }
    },
  };
})
