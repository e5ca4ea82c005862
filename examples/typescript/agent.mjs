// An agent on Node that speaks toolq's wire contract with nothing but the
// official NATS clients and the JSON Schemas in contracts/schema: it
// submits a code-mode run and awaits its completion event, then submits a
// shell command that needs approval, signs the decision with an approver
// nkey, and awaits the command's end.
//
//   toolq dev &
//   npm ci && node agent.mjs --nats nats://127.0.0.1:4222 --seed-file ../../.toolq/dev/approver.seed
//
// Plain JavaScript with JSDoc types: Node runs it as it is, and an editor
// (or tsc --checkJs) checks it against the clients' type definitions.

import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { jetstream } from "@nats-io/jetstream";
import { fromSeed } from "@nats-io/nkeys";
import { connect } from "@nats-io/transport-node";
import Ajv2020 from "ajv/dist/2020.js";

/** @typedef {import("@nats-io/transport-node").NatsConnection} NatsConnection */
/** @typedef {import("@nats-io/jetstream").JetStreamClient} JetStreamClient */

/**
 * A job, as contracts/schema/job.schema.json describes it.
 * @typedef {{id: string, tool: string, session: string, input?: unknown, created_at?: string, timeout_ms?: number, meta?: Record<string, string>}} Job
 */

/**
 * A CloudEvent of a job's status, as contracts/schema/event.schema.json describes it.
 * @typedef {{id: string, type: string, time: string, data: {job_id: string, session: string, tool?: string, status: string, result?: any, error?: {code: string, message: string}}}} JobEvent
 */

const { values: args } = parseArgs({
  options: {
    nats: { type: "string", default: process.env.TOOLQ_NATS ?? "nats://127.0.0.1:4222" },
    session: { type: "string", default: "ts-agent" },
    "seed-file": { type: "string", default: process.env.TOOLQ_APPROVER_SEED_FILE ?? "../../.toolq/dev/approver.seed" },
    command: { type: "string", default: "uname -s" },
    verdict: { type: "string", default: "approve" },
  },
});

// The schemas are the contract; every job sent and every event read is
// checked against them.
const ajv = new Ajv2020({ strict: false, validateFormats: false });
/** @param {string} name */
const schema = (name) => ajv.compile(JSON.parse(readFileSync(new URL(`../../contracts/schema/${name}.schema.json`, import.meta.url), "utf8")));
const validJob = schema("job");
const validEvent = schema("event");
const validExecInput = schema("code_mode.exec.input");
const validResult = schema("code_mode.result");

/**
 * @param {import("ajv").ValidateFunction} v
 * @param {unknown} value
 * @param {string} what
 */
function check(v, value, what) {
  if (!v(value)) {
    throw new Error(`${what} does not match its schema: ${ajv.errorsText(v.errors)}`);
  }
}

/** A fresh id: [A-Za-z0-9_-], as every id that becomes a subject token. */
const newID = () => "ts-" + randomBytes(12).toString("base64url");

// A job ends with one of these (an exec job also with denied).
const terminal = new Set(["completed", "failed", "cancelled", "denied"]);

/**
 * Follows one job's events: a subscription to its event subject, made
 * before the job is sent, so that no event falls before it.
 * @param {NatsConnection} nc
 * @param {string} session
 * @param {string} jobId
 */
async function follow(nc, session, jobId) {
  const sub = nc.subscribe(`toolq.events.${session}.${jobId}`);
  await nc.flush();
  const it = sub[Symbol.asyncIterator]();
  return {
    /**
     * The next event whose status is one of statuses.
     * @param {string[]} statuses
     * @returns {Promise<JobEvent>}
     */
    async next(...statuses) {
      for (;;) {
        const { value: m, done } = await it.next();
        if (done) throw new Error(`events of ${jobId} ended`);
        const ev = m.json();
        check(validEvent, ev, "event");
        console.error(`  event ${ev.data.status} of ${ev.data.job_id}`);
        if (statuses.includes(ev.data.status)) return /** @type {JobEvent} */ (ev);
        if (terminal.has(ev.data.status)) {
          throw new Error(`job ${jobId} ended ${ev.data.status}: ${ev.data.error?.message ?? ""}`);
        }
      }
    },
    stop: () => sub.unsubscribe(),
  };
}

/**
 * Sends a job on its tool's subject, the job id as Nats-Msg-Id (a resend
 * within the duplicate window is not enqueued twice).
 * @param {JetStreamClient} js
 * @param {Job} job
 */
async function submit(js, job) {
  check(validJob, job, "job");
  const ack = await js.publish(`toolq.jobs.${job.tool}`, JSON.stringify(job), { msgID: job.id });
  return ack;
}

/**
 * The bytes an exec decision's signature covers (contracts
 * ExecDecision.SigningPayload): each field length-prefixed with an
 * unsigned varint.
 * @param {{tenant?: string, approvalId: string, hash: string, verdict: string, always: boolean, reason: string, approver: string, issuedAtNanos: bigint, nonce: string}} d
 */
function signingPayload(d) {
  /** @type {number[]} */
  const out = [];
  /** @param {string} s */
  const put = (s) => {
    const b = Buffer.from(s, "utf8");
    let n = b.length;
    while (n >= 0x80) {
      out.push((n & 0x7f) | 0x80);
      n >>>= 7;
    }
    out.push(n);
    out.push(...b);
  };
  if (!d.tenant) {
    put("toolq.exec.decision.v1");
  } else {
    put("toolq.exec.decision.v2");
    put(d.tenant);
  }
  for (const s of [d.approvalId, d.hash, d.verdict, String(d.always), d.reason, d.approver, d.issuedAtNanos.toString(), d.nonce]) {
    put(s);
  }
  return Uint8Array.from(out);
}

/**
 * A decision on a pending approval, signed with the approver's nkey seed.
 * @param {any} pending the approval_pending event's result
 * @param {"approve" | "deny"} verdict
 * @param {Uint8Array} seed
 */
function decide(pending, verdict, seed) {
  const kp = fromSeed(seed);
  const now = Date.now();
  const d = {
    tenant: pending.tenant ?? "",
    approvalId: pending.approvalId,
    hash: pending.hash,
    verdict,
    always: false,
    reason: verdict === "deny" ? "denied by the TypeScript agent" : "",
    approver: kp.getPublicKey(),
    issuedAtNanos: BigInt(now) * 1_000_000n,
    nonce: randomBytes(16).toString("base64url"),
  };
  const signature = Buffer.from(kp.sign(signingPayload(d))).toString("base64url");
  kp.clear();
  return {
    ...(d.tenant ? { tenant: d.tenant } : {}),
    approvalId: d.approvalId,
    hash: d.hash,
    verdict: d.verdict,
    ...(d.reason ? { reason: d.reason } : {}),
    approver: d.approver,
    issuedAt: new Date(now).toISOString(),
    nonce: d.nonce,
    signature,
  };
}

async function main() {
  const nc = await connect({ servers: args.nats, name: "toolq example typescript agent" });
  const js = jetstream(nc);
  const session = args.session;
  try {
    // 1. A code-mode run: submit it, await its completion event.
    const input = { code: "const xs = [3, 1, 4, 1, 5, 9, 2, 6];\nreturn {sum: xs.reduce((a, b) => a + b, 0), max: Math.max(...xs)};", tools: [] };
    check(validExecInput, input, "code_mode.exec input");
    /** @type {Job} */
    const run = { id: newID(), tool: "code_mode.exec", session, input, created_at: new Date().toISOString() };
    const runEvents = await follow(nc, session, run.id);
    const ack = await submit(js, run);
    console.error(`submitted ${run.tool} ${run.id} (stream ${ack.stream}, seq ${ack.seq})`);
    const done = await runEvents.next("completed");
    runEvents.stop();
    check(validResult, done.data.result, "code_mode.result");
    console.log(`code mode: ${done.data.status} ${JSON.stringify(done.data.result.value)}`);

    // 2. A command off the allowlist: it waits for approval; sign the
    // decision, send it as an exec.decide job, await the command's end.
    /** @type {Job} */
    const cmd = { id: newID(), tool: "exec", session, input: { command: args.command }, created_at: new Date().toISOString() };
    const cmdEvents = await follow(nc, session, cmd.id);
    await submit(js, cmd);
    console.error(`submitted exec ${cmd.id}: ${args.command}`);
    const pendingEv = await cmdEvents.next("approval_pending", "completed");
    if (pendingEv.data.status === "approval_pending") {
      const p = pendingEv.data.result;
      console.log(`approval pending: ${p.command} (argv ${JSON.stringify(p.argv)}, host ${p.host}, hash ${p.hash})`);
      const seed = new TextEncoder().encode(readFileSync(args["seed-file"], "utf8").trim());
      const verdict = args.verdict === "deny" ? "deny" : "approve";
      /** @type {Job} */
      const decision = { id: newID(), tool: "exec.decide", session, input: { decision: decide(p, verdict, seed) }, created_at: new Date().toISOString() };
      const decEvents = await follow(nc, session, decision.id);
      await submit(js, decision);
      // The command moves on (approved, denied), or the worker refuses the
      // decision: its exec.decide job fails (an approver it does not trust).
      const moved = cmdEvents.next("approved", "denied");
      const refused = decEvents.next("failed", "completed").then((ev) => (ev.data.status === "failed" ? ev : new Promise(() => {})));
      moved.catch(() => {});
      refused.catch(() => {});
      const decided = await Promise.race([moved, refused]);
      decEvents.stop();
      if (decided.data.job_id === decision.id) {
        console.log(`decision refused: ${decided.data.error?.message ?? ""}`);
        process.exitCode = 1;
        return;
      }
      console.log(`decision: ${decided.data.status}`);
      if (decided.data.status === "denied") {
        // A denied command ends there: the event is its last.
        cmdEvents.stop();
        console.log(`exec: not run (${decided.data.error?.code ?? "denied"}: ${decided.data.error?.message ?? ""})`);
        return;
      }
    }
    const end = await cmdEvents.next("completed");
    cmdEvents.stop();
    console.log(`exec: ${end.data.status} exit ${end.data.result.exitCode} stdout ${JSON.stringify(end.data.result.stdout.trim())}`);
  } finally {
    await nc.drain();
  }
}

main().catch((err) => {
  console.error("agent:", err instanceof Error ? err.message : err);
  process.exit(1);
});
