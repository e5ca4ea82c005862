// The code-mode guest runtime. Evaluated once, in the VM that becomes the
// clean post-init image, as a function expression called with the host
// function; it returns {install, start}. Nothing here is reachable from
// guest code except the globals that install() defines.
(function (host) {
  "use strict";
  const G = globalThis;
  const O = Object;
  const freeze = O.freeze, defineProperty = O.defineProperty, getPrototypeOf = O.getPrototypeOf;
  const hasOwn = O.prototype.hasOwnProperty;
  const keys = O.keys;
  const stringify = JSON.stringify, parse = JSON.parse;
  const _Error = Error, _TypeError = TypeError, _String = String, _Number = Number;
  const apply = Reflect.apply;
  const then = Promise.prototype.then;
  const imul = Math.imul;
  const isArray = Array.isArray;

  // No code generation from strings: eval and Function leave the global
  // object, and every function prototype's constructor throws.
  const blocked = function () {
    throw new _TypeError("code generation from strings is disabled in code mode");
  };
  for (const f of [function () {}, async function () {}, function* () {}, async function* () {}]) {
    defineProperty(getPrototypeOf(f), "constructor", {
      value: blocked, writable: false, enumerable: false, configurable: false,
    });
  }
  delete G.eval;
  delete G.Function;

  function enc(v) {
    const s = stringify(v);
    return s === undefined ? "null" : s;
  }
  function op(name, payload) {
    return host(name, payload === undefined ? "" : enc(payload));
  }
  function unwrap(envelope) {
    const r = parse(envelope);
    if (r !== null && typeof r === "object" && hasOwn.call(r, "error")) {
      throw new _Error(_String(r.error));
    }
    return r === null || typeof r !== "object" ? undefined : r.value;
  }
  async function settle(r) {
    return typeof r === "string" ? r : await r;
  }
  function safeString(v) {
    try {
      return _String(v);
    } catch (_) {
      return "non-printable value";
    }
  }
  function describeError(e) {
    if (e !== null && (typeof e === "object" || typeof e === "function")) {
      let name, message, stack;
      try {
        name = e.name;
        message = e.message;
        stack = e.stack;
      } catch (_) {}
      return {
        name: typeof name === "string" ? name : "",
        message: typeof message === "string" ? message : safeString(e),
        stack: typeof stack === "string" ? stack : "",
      };
    }
    return { name: "", message: safeString(e), stack: "" };
  }

  function text(value) {
    let s;
    if (typeof value === "string") {
      s = value;
    } else {
      try {
        s = stringify(value);
      } catch (_) {}
      if (s === undefined) s = safeString(value);
    }
    op("output", { type: "text", text: s });
  }
  function json(value) {
    const s = stringify(value);
    host("output", '{"type":"json","value":' + (s === undefined ? "null" : s) + "}");
  }
  async function yield_control(reason) {
    await settle(op("yield", { reason: reason === undefined ? "" : safeString(reason) }));
  }

  async function call(id, input) {
    const r = parse(await settle(op("call", { id: _String(id), input: input === undefined ? null : input })));
    if (r !== null && typeof r === "object" && hasOwn.call(r, "error")) {
      return { ok: false, error: _String(r.error) };
    }
    return { ok: true, value: r === null || typeof r !== "object" ? undefined : r.value };
  }
  async function callValue(id, input) {
    return unwrap(await settle(op("call", { id: _String(id), input: input === undefined ? null : input })));
  }
  async function callMCP(id, input) {
    return unwrap(await settle(op("call", { id: id, input: input === undefined ? null : input, mcp: true })));
  }
  async function search(query, options) {
    let limit = 0;
    if (options !== null && typeof options === "object" && options.limit !== undefined) {
      limit = _Number(options.limit);
    }
    return unwrap(op("search", { query: _String(query), limit: limit }));
  }
  async function describe(id) {
    return unwrap(op("describe", { id: _String(id) }));
  }

  function deepFreeze(v) {
    if (v !== null && typeof v === "object") {
      for (const k of keys(v)) deepFreeze(v[k]);
      freeze(v);
    }
    return v;
  }
  function defineGlobal(name, value) {
    defineProperty(G, name, { value: value, writable: false, enumerable: false, configurable: false });
  }

  // xoshiro128** seeded by the host for every run: restored images would
  // otherwise share one Math.random sequence.
  let s0 = 1, s1 = 2, s2 = 3, s3 = 4;
  function rotl(x, k) {
    return (x << k) | (x >>> (32 - k));
  }
  function next() {
    const r = imul(rotl(imul(s1, 5), 7), 9) >>> 0;
    const t = s1 << 9;
    s2 ^= s0;
    s3 ^= s1;
    s1 ^= s2;
    s0 ^= s3;
    s2 ^= t;
    s3 = rotl(s3, 11);
    return r;
  }
  Math.random = function random() {
    return ((next() >>> 5) * 67108864 + (next() >>> 6)) / 9007199254740992;
  };

  function install(configJSON, catalogJSON) {
    const cfg = parse(configJSON);
    if (isArray(cfg.seed) && cfg.seed.length === 4) {
      s0 = cfg.seed[0] | 0; s1 = cfg.seed[1] | 0; s2 = cfg.seed[2] | 0; s3 = cfg.seed[3] | 0;
      if ((s0 | s1 | s2 | s3) === 0) s0 = 1;
    }
    const tools = { search: search, describe: describe, call: call, callValue: callValue };
    for (const name of keys(cfg.safeNames || {})) {
      const id = cfg.safeNames[name];
      if (hasOwn.call(tools, name)) continue;
      tools[name] = function (input) {
        return callValue(id, input);
      };
    }
    const MCP = {};
    const servers = cfg.mcp || {};
    for (const server of keys(servers)) {
      const spec = servers[server];
      const ns = {};
      for (const fn of keys(spec.tools || {})) {
        const id = spec.tools[fn];
        ns[fn] = function (input) {
          return callMCP(id, input);
        };
      }
      const declaration = _String(spec.declaration || "");
      ns.$api = async function (toolName, options) {
        return declaration;
      };
      MCP[server] = freeze(ns);
    }
    const files = {};
    for (const server of keys(servers)) {
      files["mcp/" + server + ".d.ts"] = _String(servers[server].declaration || "");
    }
    const API = {
      list: async function (prefix) {
        const p = prefix === undefined ? "" : _String(prefix);
        return keys(files).filter(function (f) {
          return p === "" || f === p || f.startsWith(p.endsWith("/") ? p : p + "/");
        });
      },
      read: async function (path) {
        const p = _String(path);
        if (!hasOwn.call(files, p)) throw new _Error("API file not found: " + p);
        return files[p];
      },
    };
    // ALL_TOOLS is parsed on first use: most programs never read it.
    let allTools;
    defineProperty(G, "ALL_TOOLS", {
      get: function ALL_TOOLS() {
        if (allTools === undefined) allTools = deepFreeze(parse(catalogJSON));
        return allTools;
      },
      enumerable: false,
      configurable: false,
    });
    defineGlobal("tools", freeze(tools));
    defineGlobal("MCP", freeze(MCP));
    defineGlobal("namespaces", freeze({ mcp: MCP }));
    defineGlobal("API", freeze(API));
    defineGlobal("text", text);
    defineGlobal("json", json);
    defineGlobal("yield_control", yield_control);
  }

  function fail(e) {
    host("fail", enc(describeError(e)));
  }
  function start(fn) {
    if (typeof fn !== "function") {
      fail(new _TypeError("code did not evaluate to a function body"));
      return;
    }
    let p;
    try {
      p = fn();
    } catch (e) {
      fail(e);
      return;
    }
    apply(then, p, [
      function (value) {
        let s;
        try {
          s = stringify(value);
        } catch (e) {
          fail(new _TypeError("the returned value is not JSON-serializable: " + describeError(e).message));
          return;
        }
        host("done", s === undefined ? "" : s);
      },
      fail,
    ]);
  }
  return { install: install, start: start };
})
