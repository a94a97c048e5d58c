// hopgraph web page: sign in with a token, ask, read the evidence; admins manage documents.
// Everything shown from the server is set as text (textContent), never parsed as HTML: document
// text is untrusted.
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "hopgraph.token";
const PAGE = 50; // documents per page of the admin list
const state = { info: null, admin: false, docOffset: 0, docTotal: 0 };

// ------------------------------------------------------------------ small helpers
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "onclick") node.addEventListener("click", value);
    else if (key === "className") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function show(node, text) {
  node.textContent = text || "";
  node.hidden = !text;
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(path, { method = "GET", json, form } = {}) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) || ""}` };
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (form !== undefined) {
    body = form;
  }
  const response = await fetch(path, { method, headers, body });
  const payload = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = payload.error || {};
    throw new ApiError(response.status, error.code || `http_${response.status}`,
      `${error.message || response.statusText} (HTTP ${response.status})`);
  }
  return payload;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ------------------------------------------------------------------ signing in
async function signIn(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
  try {
    state.info = await api("/v1/index");
  } catch (error) {
    // Only a refused token is forgotten: a busy (429) or restarting (503) server keeps the tab's session.
    if (error.status === 401) sessionStorage.removeItem(TOKEN_KEY);
    show($("signin-error"), error.status === 401 ? "This token is not accepted by the server." : error.message);
    return false;
  }
  state.admin = "counts" in state.info; // index counts are sent to admins only
  show($("signin-error"), "");
  $("signin-panel").hidden = true;
  $("app").hidden = false;
  $("signout").hidden = false;
  show($("who"), state.admin ? "signed in (admin)" : "signed in");
  fillMethods(state.info);
  $("admin").hidden = !state.admin;
  if (state.admin) {
    renderStats(state.info);
    loadDocuments();
  }
  return true;
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
}

function fillMethods(info) {
  const select = $("method");
  select.replaceChildren(...info.methods.map((m) => el("option", { value: m }, m)));
  select.value = info.default_method;
  $("budget").max = info.limits.max_budget;
  $("budget").placeholder = "server default";
}

// ------------------------------------------------------------------ asking
function question() {
  const body = { query: $("question").value, method: $("method").value };
  if ($("budget").value) body.budget = Number($("budget").value);
  return body;
}

async function ask(withAnswer) {
  const body = question();
  const buttons = [$("ask-button"), $("retrieve-button")];
  buttons.forEach((b) => (b.disabled = true));
  $("result").hidden = false;
  $("result").setAttribute("aria-busy", "true");
  show($("ask-error"), "");
  $("answer").textContent = withAnswer ? "Thinking…" : "";
  $("citations").replaceChildren();
  $("evidence").replaceChildren();
  $("used").textContent = "";
  try {
    if (withAnswer) {
      try {
        renderAnswer(await api("/v1/answer", { method: "POST", json: body }));
        return;
      } catch (error) {
        // Without the answer model, the retrieval evidence is still worth showing.
        if (!["llm_unavailable", "llm_rejected", "answers_busy", "answers_busy_for_user"].includes(error.code)) {
          throw error;
        }
        show($("ask-error"), `No answer: ${error.message}. The retrieval evidence is shown below.`);
      }
    }
    $("answer").textContent = "";
    renderAnswer(await api("/v1/retrieve", { method: "POST", json: body }));
  } catch (error) {
    $("answer").textContent = "";
    show($("ask-error"), error.message);
  } finally {
    buttons.forEach((b) => (b.disabled = false));
    $("result").setAttribute("aria-busy", "false");
  }
}

// A citation names each document by its title (its id where there is none) and, where the
// document's format keeps them, the page or section the piece starts in: "Crane report (p. 3)".
function titleOf(ev) {
  const places = ev.places || [];
  const names = ev.doc_ids.map((doc, i) => (ev.titles[i] || doc) + (places[i] ? ` (${places[i]})` : ""));
  return [...new Set(names)].join("; ") || "untitled";
}

function renderAnswer(result) {
  const evidence = result.evidence || [];
  if ("answer" in result) {
    $("answer").textContent = result.found ? result.answer : `${result.answer} (not found in the evidence)`;
  }
  const cites = (result.citations || []).map((c) =>
    el("button", { type: "button", className: "citation", "data-evidence": c.evidence,
      onclick: () => openPassage(evidence[c.evidence - 1], c.evidence) },
    `[${c.evidence}] ${titleOf(c)}`));
  $("citations").replaceChildren(...cites);
  const tokens = evidence.reduce((sum, ev) => sum + ev.tokens, 0);
  const parts = [`method ${result.method}`, `budget ${result.budget} tokens`, `${evidence.length} evidence items (${tokens} tokens)`];
  if (result.version) parts.push(`index version ${result.version}`);
  if (result.evidence_dropped) parts.push(`${result.evidence_dropped} left out to fit the model's context`);
  $("used").textContent = parts.join(" · ");
  $("evidence").replaceChildren(...evidence.map((ev, i) => el("li", { id: `evidence-${i + 1}` },
    el("div", {}, el("button", { type: "button", className: "link", onclick: () => openPassage(ev, i + 1) }, titleOf(ev)),
      el("span", { className: "meta" }, ` ${ev.kind} · score ${ev.score.toFixed(4)} · ${ev.tokens} tokens · documents ${ev.doc_ids.join(", ")}`)),
    el("div", { className: "path" }, `path: ${ev.path}`),
    el("div", { className: "text" }, ev.text))));
}

function openPassage(ev, n) {
  if (!ev) return;
  $("passage-title").textContent = `[${n}] ${titleOf(ev)}`;
  $("passage-meta").textContent = `documents: ${ev.doc_ids.join(", ")} · ${ev.kind} ${ev.index} · chunk ${ev.chunk} · score ${ev.score.toFixed(4)}`;
  $("passage-path").textContent = `path: ${ev.path}`;
  $("passage-text").textContent = ev.text;
  $("passage").showModal();
}

// ------------------------------------------------------------------ admin: stats, documents, jobs
function renderStats(info) {
  const items = [["version", info.version || "(root)"], ["jobs pending", info.jobs_pending]];
  for (const [name, count] of Object.entries(info.counts || {})) items.push([name, count]);
  $("stats").replaceChildren(...items.map(([name, value]) => el("div", {}, el("b", {}, value), name)));
}

async function refreshStats() {
  state.info = await api("/v1/index");
  renderStats(state.info);
}

async function loadDocuments() {
  try {
    const page = await api(`/v1/documents?offset=${state.docOffset}&limit=${PAGE}`);
    state.docTotal = page.total;
    const end = Math.min(page.offset + page.documents.length, page.total);
    $("doc-count").textContent = page.total ? `${page.offset + 1}–${end} of ${page.total}` : "none";
    $("documents").tBodies[0].replaceChildren(...page.documents.map((d) => el("tr", { "data-id": d.id },
      el("td", {}, d.id), el("td", {}, d.title), el("td", {}, d.source),
      el("td", {}, (d.acl || []).join(", ")), el("td", {}, d.timestamp || ""),
      el("td", {}, el("button", { type: "button", className: "secondary", onclick: () => remove(d.id) }, "Delete")))));
    $("doc-prev").disabled = state.docOffset === 0;
    $("doc-next").disabled = end >= page.total;
  } catch (error) {
    show($("admin-error"), error.message);
  }
}

async function follow(job, label) {
  const line = el("li", { "data-job": job.id }, `${label}: ${job.status}`);
  $("jobs").prepend(line);
  let record = job;
  let wait = 500; // doubling to 5 s: a job that stays "publishing" (a version the server cannot load) is not polled twice a second for ever
  while (!["done", "failed"].includes(record.status)) {
    await sleep(wait);
    wait = Math.min(wait * 2, 5000);
    try {
      record = await api(`/v1/jobs/${encodeURIComponent(job.id)}`);
    } catch (error) {
      line.textContent = `${label}: ${error.message}`;
      return;
    }
    line.textContent = `${label}: ${record.status}`;
  }
  line.className = record.status;
  line.textContent = record.status === "done"
    ? `${label}: done (version ${record.version})`
    : `${label}: failed: ${record.error || "see the server log"}`;
  await Promise.all([loadDocuments(), refreshStats()]);
}

async function upload(event) {
  event.preventDefault();
  show($("admin-error"), "");
  const form = new FormData();
  for (const file of $("files").files) form.append("files", file);
  form.append("acl", $("upload-acl").value);
  try {
    const job = await api("/v1/documents/upload", { method: "POST", form });
    $("upload").reset();
    const more = job.add_count > 3 ? ` and ${job.add_count - 3} more` : ""; // add_first: the first ids only
    await follow(job, `upload of ${job.add_first.slice(0, 3).join(", ")}${more}`);
  } catch (error) {
    show($("admin-error"), error.message);
  }
}

async function remove(id) {
  if (!confirm(`Delete document ${id}?`)) return;
  show($("admin-error"), "");
  try {
    await follow(await api(`/v1/documents/${encodeURIComponent(id)}`, { method: "DELETE" }), `delete ${id}`);
  } catch (error) {
    show($("admin-error"), error.message);
  }
}

// ------------------------------------------------------------------ wiring
document.addEventListener("DOMContentLoaded", () => {
  $("signin").addEventListener("submit", (event) => {
    event.preventDefault();
    signIn($("token").value.trim());
  });
  $("signout").addEventListener("click", signOut);
  $("ask").addEventListener("submit", (event) => {
    event.preventDefault();
    ask(true);
  });
  $("retrieve-button").addEventListener("click", () => {
    if ($("ask").reportValidity()) ask(false);
  });
  $("upload").addEventListener("submit", upload);
  $("doc-prev").addEventListener("click", () => {
    state.docOffset = Math.max(0, state.docOffset - PAGE);
    loadDocuments();
  });
  $("doc-next").addEventListener("click", () => {
    state.docOffset += PAGE;
    loadDocuments();
  });
  $("doc-refresh").addEventListener("click", () => Promise.all([loadDocuments(), refreshStats()]));
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) signIn(saved);
});
