// toolq console: the live feed, confirmations, and approver signing.
// Decisions are signed here with the operator's own nkey seed (WebCrypto
// Ed25519); the seed is never sent anywhere.
"use strict";

const csrf = document.querySelector('meta[name="csrf-token"]').content;

// ---- confirmations ------------------------------------------------------

for (const form of document.querySelectorAll("form[data-confirm]")) {
  form.addEventListener("submit", (e) => {
    if (!window.confirm(form.dataset.confirm)) e.preventDefault();
  });
}

// ---- the live feed -----------------------------------------------------

let reloadTimer = null;
function reloadSoon() {
  if (reloadTimer === null) reloadTimer = setTimeout(() => location.reload(), 1500);
}

function cell(tr, text, label) {
  const td = document.createElement("td");
  td.textContent = text;
  td.dataset.label = label;
  tr.appendChild(td);
  return td;
}

function when(t) {
  const d = new Date(t);
  return isNaN(d) ? "-" : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

// upsertJob shows a job event in the jobs table without a reload.
function upsertJob(it) {
  const table = document.getElementById("jobs");
  if (!table) return;
  const body = table.tBodies[0];
  const key = (it.tenant || "") + "/" + it.session + "/" + it.jobId;
  let tr = null;
  for (const row of body.rows) if (row.dataset.key === key) { tr = row; break; }
  const status = table.dataset.status;
  let shown = it.status;
  if (it.status === "progress" && tr) shown = tr.cells[1].textContent;
  if (status && shown !== status) { if (tr) tr.remove(); return; }
  if (!tr) {
    tr = document.createElement("tr");
    tr.dataset.key = key;
    const a = document.createElement("a");
    a.href = "/job?" + new URLSearchParams({ tenant: it.tenant || "", session: it.session, id: it.jobId });
    a.textContent = it.jobId;
    const id = cell(tr, "", "Job");
    id.className = "id";
    id.appendChild(a);
    cell(tr, "", "Status");
    cell(tr, it.tool || "", "Tool");
    cell(tr, it.tenant || "(default)", "Tenant");
    cell(tr, it.session, "Session");
    cell(tr, "", "Last change");
    cell(tr, "", "Error");
    const empty = document.getElementById("jobs-empty");
    if (empty) empty.remove();
  }
  tr.cells[1].textContent = shown;
  tr.cells[1].className = "status s-" + shown;
  tr.cells[5].textContent = when(it.time);
  tr.cells[6].textContent = it.error ? it.error.code + ": " + it.error.message : "";
  body.insertBefore(tr, body.firstChild);
}

function onItem(it) {
  switch (document.body.dataset.page) {
    case "jobs":
      if (it.kind === "job") upsertJob(it);
      break;
    case "job":
    case "runs":
    case "breakers":
      reloadSoon();
      break;
    case "dlq":
      if (it.kind === "dlq") document.getElementById("dlq-new").hidden = false;
      break;
    case "approvals":
      if (it.kind === "job") approvalChanged(it);
      break;
  }
}

if (document.body.dataset.live) {
  const badge = document.getElementById("live-state");
  let wasOpen = false;
  const es = new EventSource(document.body.dataset.live);
  es.addEventListener("open", () => {
    badge.hidden = false;
    // Back after a break: what the page shows may have missed items.
    if (wasOpen && document.body.dataset.page === "jobs") reloadSoon();
    wasOpen = true;
  });
  es.addEventListener("error", () => { badge.hidden = true; });
  es.addEventListener("item", (e) => {
    try { onItem(JSON.parse(e.data)); } catch (err) { console.error(err); }
  });
}

// ---- nkeys and ed25519 ------------------------------------------------

const B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

function b32decode(s) {
  const out = [];
  let bits = 0, val = 0;
  for (const c of s) {
    const i = B32.indexOf(c);
    if (i < 0) throw new Error("not an nkey (base32)");
    val = ((val << 5) | i) & 0xffff;
    bits += 5;
    if (bits >= 8) { bits -= 8; out.push((val >> bits) & 0xff); }
  }
  return new Uint8Array(out);
}

function b32encode(bytes) {
  let out = "", bits = 0, val = 0;
  for (const b of bytes) {
    val = ((val << 8) | b) & 0xffff;
    bits += 8;
    while (bits >= 5) { bits -= 5; out += B32[(val >> bits) & 31]; }
  }
  if (bits > 0) out += B32[(val << (5 - bits)) & 31];
  return out;
}

// crc16 is nkeys' checksum (CRC-16/XMODEM).
function crc16(data) {
  let crc = 0;
  for (const b of data) {
    crc ^= b << 8;
    for (let i = 0; i < 8; i++) crc = (crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1) & 0xffff;
  }
  return crc;
}

const PREFIX_SEED = 18 << 3, PREFIX_USER = 20 << 3, PREFIX_ACCOUNT = 0;

// decodeSeed returns the raw ed25519 seed and the public prefix of an
// nkey seed ("SU…" for a user, "SA…" for an account).
function decodeSeed(text) {
  const raw = b32decode(text.trim());
  if (raw.length !== 36) throw new Error("not an nkey seed (length)");
  const body = raw.subarray(0, 34);
  const sum = raw[34] | (raw[35] << 8);
  if (crc16(body) !== sum) throw new Error("not an nkey seed (checksum)");
  if ((raw[0] & 0xf8) !== PREFIX_SEED) throw new Error("not an nkey seed");
  const prefix = ((raw[0] & 7) << 5) | ((raw[1] & 0xf8) >> 3);
  if (prefix !== PREFIX_USER && prefix !== PREFIX_ACCOUNT) throw new Error("an approver seed is a user (SU…) or account (SA…) seed");
  return { seed: raw.slice(2, 34), prefix };
}

function encodePublic(prefix, pub) {
  const raw = new Uint8Array(35);
  raw[0] = prefix;
  raw.set(pub, 1);
  const sum = crc16(raw.subarray(0, 33));
  const out = new Uint8Array(35);
  out.set(raw.subarray(0, 33));
  out[33] = sum & 0xff;
  out[34] = sum >> 8;
  return b32encode(out);
}

function b64url(bytes) {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function unb64url(s) {
  const bin = atob(s.replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

// loadKey imports a seed as a WebCrypto Ed25519 key (PKCS #8).
async function loadKey(text) {
  const { seed, prefix } = decodeSeed(text);
  const der = new Uint8Array(48);
  der.set([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]);
  der.set(seed, 16);
  const key = await crypto.subtle.importKey("pkcs8", der, { name: "Ed25519" }, true, ["sign"]);
  const jwk = await crypto.subtle.exportKey("jwk", key);
  seed.fill(0);
  der.fill(0);
  const pub = unb64url(jwk.x);
  return { key, publicKey: encodePublic(prefix, pub) };
}

// signingPayload is contracts.ExecDecision.SigningPayload: every field
// but the signature, each preceded by its length as a uvarint.
function signingPayload(d, issuedAtNanos) {
  const enc = new TextEncoder();
  const parts = [];
  const put = (s) => {
    const b = enc.encode(s);
    let n = b.length;
    const len = [];
    while (n >= 0x80) { len.push((n & 0x7f) | 0x80); n = Math.floor(n / 128); }
    len.push(n);
    parts.push(Uint8Array.from(len), b);
  };
  if (d.tenant) { put("toolq.exec.decision.v2"); put(d.tenant); } else put("toolq.exec.decision.v1");
  put(d.approvalId);
  put(d.hash);
  put(d.verdict);
  put(d.always ? "true" : "false");
  put(d.reason || "");
  put(d.approver);
  put(issuedAtNanos);
  put(d.nonce);
  const size = parts.reduce((n, p) => n + p.length, 0);
  const out = new Uint8Array(size);
  let off = 0;
  for (const p of parts) { out.set(p, off); off += p.length; }
  return out;
}

async function signDecision(signer, approval, verdict, reason, always) {
  const ms = Date.now();
  const nonce = new Uint8Array(16);
  crypto.getRandomValues(nonce);
  const d = {
    approvalId: approval.id, hash: approval.hash, verdict,
    reason, approver: signer.publicKey, issuedAt: new Date(ms).toISOString(), nonce: b64url(nonce),
  };
  if (approval.tenant) d.tenant = approval.tenant;
  if (always) d.always = true;
  const payload = signingPayload(d, (BigInt(ms) * 1000000n).toString());
  const sig = await crypto.subtle.sign({ name: "Ed25519" }, signer.key, payload);
  d.signature = b64url(new Uint8Array(sig));
  return d;
}

// ---- the approvals page --------------------------------------------------

let signer = null;
const SEED_KEY = "toolq.approverSeed";

async function useSeed(text, keep) {
  const state = document.getElementById("signer-state");
  try {
    signer = await loadKey(text);
    state.textContent = "Signing as " + signer.publicKey;
    state.className = "note done";
    if (keep) sessionStorage.setItem(SEED_KEY, text.trim());
  } catch (err) {
    signer = null;
    state.textContent = "Key not loaded: " + err.message;
    state.className = "error";
  }
}

function approvalChanged(it) {
  const art = document.getElementById("approval-" + it.jobId);
  if (!art && it.status === "approval_pending") {
    const state = document.getElementById("signer-state");
    let banner = document.getElementById("approvals-new");
    if (!banner) {
      banner = document.createElement("p");
      banner.id = "approvals-new";
      banner.className = "note";
      banner.textContent = "A new approval is waiting: ";
      const a = document.createElement("a");
      a.href = "";
      a.textContent = "reload";
      banner.appendChild(a);
      state.parentNode.after(banner);
    }
    return;
  }
  if (art) {
    const s = art.querySelector("p .status");
    if (s && it.status !== "progress") { s.textContent = it.status; s.className = "status s-" + it.status; }
  }
}

// alwaysConfirmed says the always box of art is ticked: the always
// button works only then.
function alwaysConfirmed(art) {
  const box = art.querySelector(".always-confirm");
  return !!box && box.checked;
}

function enableButtons(art) {
  for (const b of art.querySelectorAll(".decide button")) {
    b.disabled = b.dataset.always === "true" && !alwaysConfirmed(art);
  }
}

async function decide(art, verdict, always) {
  const out = art.querySelector(".outcome");
  if (!signer) { out.textContent = "Load your approver key first."; out.className = "outcome error"; return; }
  if (always && !alwaysConfirmed(art)) { out.textContent = "Tick the box to confirm what the allowlist gains."; out.className = "outcome error"; return; }
  const buttons = art.querySelectorAll(".decide button");
  buttons.forEach((b) => { b.disabled = true; });
  const box = art.querySelector(".always-confirm");
  if (box) box.disabled = true;
  out.textContent = "Signing and sending…";
  out.className = "outcome note";
  try {
    const d = await signDecision(signer, { id: art.dataset.id, tenant: art.dataset.tenant, hash: art.dataset.hash }, verdict, art.querySelector(".reason").value, always);
    const res = await fetch("/approvals/decide", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify({ decision: d }),
    });
    const rep = await res.json();
    if (rep.ok && rep.applied) {
      out.textContent = rep.status + (always ? " always" : "") + " (job " + rep.jobId + ")";
      out.className = "outcome done";
      const s = art.querySelector("p .status");
      s.textContent = rep.status;
      s.className = "status s-" + rep.status;
      return;
    }
    out.textContent = rep.ok ? "Already " + rep.status + ": decision ignored" : "Refused: " + rep.error.code + ": " + rep.error.message;
    out.className = "outcome error";
  } catch (err) {
    out.textContent = "Failed: " + err.message;
    out.className = "outcome error";
  }
  if (box) box.disabled = false;
  enableButtons(art);
}

if (document.getElementById("signer")) {
  const seedInput = document.getElementById("seed");
  const keep = document.getElementById("seed-keep");
  document.getElementById("seed-load").addEventListener("click", () => {
    useSeed(seedInput.value, keep.checked);
    seedInput.value = "";
  });
  document.getElementById("seed-file").addEventListener("change", async (e) => {
    const f = e.target.files[0];
    if (f) await useSeed(await f.text(), keep.checked);
    e.target.value = "";
  });
  document.getElementById("seed-forget").addEventListener("click", () => {
    signer = null;
    sessionStorage.removeItem(SEED_KEY);
    const state = document.getElementById("signer-state");
    state.textContent = "No key loaded.";
    state.className = "note";
  });
  const kept = sessionStorage.getItem(SEED_KEY);
  if (kept) { keep.checked = true; useSeed(kept, true); }
  for (const art of document.querySelectorAll("article.approval")) {
    for (const b of art.querySelectorAll(".decide button")) b.addEventListener("click", () => decide(art, b.dataset.verdict, b.dataset.always === "true"));
    const box = art.querySelector(".always-confirm");
    if (box) box.addEventListener("change", () => enableButtons(art));
  }
}
