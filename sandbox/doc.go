// Package sandbox runs code-mode programs: model-written JavaScript or
// TypeScript executed in QuickJS-NG compiled to WebAssembly (the quickjs.wasm
// of the npm package quickjs-wasi 3.7.0) on wazero, with the guest runtime
// of the code-mode contract (ALL_TOOLS, tools, MCP, namespaces, API, text, json,
// yield_control). A run that awaits tool calls is frozen into a signed
// snapshot and resumed later, in any process holding the key it was signed
// with, and only as the run, session and step it was made for.
//
// The package imports no messaging: the bus side stores snapshots and feeds
// settlements back.
//
// # Engine
//
// One Engine per process. NewEngine compiles quickjs.wasm once (wazero's
// on-disk compilation cache makes later starts fast), evaluates the guest
// runtime in a first VM and keeps that VM's memory as the clean post-init
// image. Every run gets a VM holding that image: a warm one from the pool, or
// a fresh module instance the image is copied into. A VM that trapped is
// closed, never reused; a healthy one gets the image copied back after its
// run, by the pool off the run's path and always before it is handed out
// again. A resume writes only the snapshot's changed chunks over a pooled
// VM's image. Without quickjs.wasm (fetched by `make wasm`, which runs
// scripts/fetch-quickjs.sh) NewEngine fails with runtime_unavailable.
//
// EngineConfig.Observer, when set, is told the pool's idle and in-use VMs
// after every change and each snapshot restore with its duration, for
// metrics; the package names no metrics library.
//
// # Exec
//
// Engine.Exec validates the Input as the code-mode contract says (one of code and command,
// equal when both are set; language javascript, the default, or typescript,
// transpiled by esbuild without type checking), refuses import, require,
// dynamic import and module-loader forms with invalid_input, and runs the
// code as the body of an async function: top-level await and return work.
// The run ends completed (the returned value, as JSON), failed (error and,
// for host-side causes, one of the contract's codes) or waiting. A thrown
// error is reported with its stack, its frames at the guest's lines and
// columns (code.js:L:C, or code.ts:L:C through esbuild's source map); a
// syntax error with "line L, column C".
//
// # Guest runtime
//
// The guest sees ALL_TOOLS (compact entries of every non-MCP tool of the
// run's Catalog), tools.search/describe/call/callValue, tools.<safeName> for
// unambiguous names that do not shadow a helper, MCP.<server>.<tool> and
// MCP.<server>.$api() for tools of source "mcp", namespaces.mcp, API.list and
// API.read over generated MCP declarations, text(), json() and
// yield_control(). There is no eval, Function constructor, module loader,
// file system, network, environment or timer. Host values cross only as JSON
// text; host errors become plain Errors. tools.call resolves with {ok, value}
// or {ok: false, error}; callValue resolves with the value or throws.
//
// # Bridge
//
// A Bridge serves search, describe and call. Embed CatalogBridge for the
// default ranked search and describe over the run's catalog. Call answers a
// ToolCall at once or marks it pending; a pending call becomes a pending
// promise in the guest and a PendingToolCall in the waiting Result.
//
// # Snapshots and resume
//
// When the guest is idle with pending calls (or after yield_control), Exec
// returns a waiting Result and a snapshot: the VM's memory as a delta (XOR)
// against the post-init image, zstd-compressed, with the host's bookkeeping
// (catalog, limits, pending call ids and their resolvers, output so far,
// telemetry), HMAC-SHA256-signed, under a versioned header carrying the
// sha256 of the wasm build and of the image. A snapshot is self-contained:
// Engine.Resume needs only the blob, the settlements and a Bridge. It
// refuses a bad signature, another build, an unknown key id, a snapshot of
// another run, session or step, or a malformed blob with internal_error, one above maxSnapshotBytes with snapshot_limit_exceeded,
// settles the calls in the order given (draining the job queue after each,
// as if the results had arrived live) and ends completed, failed or waiting
// again. Restores of one snapshot replay its Math.random sequence.
//
// # Limits
//
// Limits follow the code-mode contract: timeoutMs per exec or resume slice (enforced by
// QuickJS's interrupt handler, so that catch blocks cannot swallow it),
// memoryLimitBytes (QuickJS heap; the wasm memory is capped at 2.5× the
// engine's maximum plus 2 MiB), maxOutputBytes (text, json and the returned
// value together; each output item also costs 16 bytes), maxOutputItems,
// maxTotalCpuMs (time running over exec and every resume),
// maxSnapshotBytes, maxPendingToolCalls, searchDefaultLimit and
// maxSearchLimit. A failed run's error text is cut to 4 KiB.
//
// Module loading (import and export statements, import(), import.meta,
// require, module, exports and other loaders) is refused with
// invalid_input after a parse of the code, so text that only looks like a
// loader runs.
package sandbox
