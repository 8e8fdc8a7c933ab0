// unknown.js: the tool calls whose outcome is unknown (#/unknown), and for
// an admin token the form that settles one.
//
// These calls are the ones nobody may run again until a person decides, so
// the list is read whole (every page), not a page at a time. The resolve
// buttons and form are built only for an admin token and removed for any
// other: a role that may not resolve never sees a control that would only
// answer 403.

import {get, query, requestPath, send, serverNow} from "./api.js";
import {cell, clear, duration, el, isId, parseTime, requestHref} from "./dom.js";

const PAGE = 500;
const MAX_PAGES = 100;

let isAdmin = false;
let form = null;     // the resolve form, while the token is an admin's
let target = null;   // {rid, cid}: the call the form settles
let loading = 0;

/** Sets the role the page works for; builds or drops the admin's controls. */
export function setRole(role) {
  isAdmin = role === "admin";
  if (!isAdmin && form) {
    form.remove();
    form = null;
    target = null;
  }
  if (isAdmin && !form) {
    form = buildForm();
    document.getElementById("unknown-layout").appendChild(form);
  }
  document.getElementById("unknown-layout").classList.toggle("with-form", isAdmin);
  // Rows drawn for another role must not keep (or lack) their buttons.
  clear(document.querySelector("#unknown tbody"));
}

export function setupUnknown() {
  document.getElementById("unknown-reload").addEventListener("click", () => showUnknown());
}

export async function showUnknown() {
  const generation = ++loading;
  const items = [];
  let cursor = null;
  document.getElementById("unknown-count").textContent = "loading…";
  try {
    for (let page = 0; page < MAX_PAGES; page++) {
      const answer = await get("/v1/tool-calls" + query({state: "unknown", limit: PAGE, cursor}));
      if (generation !== loading) return;
      if (Array.isArray(answer.items)) items.push(...answer.items);
      cursor = typeof answer.next_cursor === "string" ? answer.next_cursor : null;
      if (cursor === null) break;
    }
  } catch {
    if (generation === loading) document.getElementById("unknown-count").textContent = "";
    return; // the error banner says why
  }
  if (generation !== loading) return;
  renderRows(items);
}

function renderRows(items) {
  const tbody = clear(document.querySelector("#unknown tbody"));
  const now = serverNow();
  for (const c of items) tbody.appendChild(row(c, now));
  document.getElementById("unknown-empty").hidden = items.length !== 0;
  document.getElementById("unknown-count").textContent =
    items.length + (items.length === 1 ? " call needs a decision" : " calls need a decision");
  const head = document.querySelector("#unknown thead tr");
  const actions = head.querySelector("th.actions");
  if (isAdmin && !actions) head.appendChild(el("th", {class: "actions"}, ""));
  if (!isAdmin && actions) actions.remove();
  markTarget();
}

function row(c, now) {
  const rid = String(c.request_id);
  const cid = String(c.tool_call_id);
  const holder = c.holder && typeof c.holder === "object" ? c.holder : {};
  const tr = el("tr", {"data-key": rid + ":" + cid},
    cell("request mono", isId(rid) ? el("a", {href: requestHref(rid)}, rid) : rid),
    cell("tool-call mono", cid),
    cell("tool mono", c.tool),
    cell("attempt mono", holder.attempt_id),
    cell("owner mono", holder.owner),
    cell("fencing-token num", c.fencing_token),
    cell("created-at mono", c.created_at),
    // How long the key has been held back: the oldest wait comes first to mind.
    cell("age num", Number.isFinite(parseTime(c.created_at)) ? duration(now - parseTime(c.created_at)) : "",
      {title: "since the claim; the lease ran out some time after it"}),
  );
  if (isAdmin) {
    const button = el("button", {type: "button", class: "resolve-open"}, "Resolve…");
    button.addEventListener("click", () => choose(rid, cid, c.tool));
    tr.appendChild(el("td", {class: "actions"}, button));
  }
  return tr;
}

// --- the admin's resolve form ---

function buildForm() {
  const f = el("form", {id: "resolve-form", class: "card resolve-card", novalidate: true, autocomplete: "off"});
  const resolution = el("select", {name: "resolution", id: "resolve-resolution"},
    el("option", {value: "succeeded"}, "succeeded: it ran, store this result"),
    el("option", {value: "failed"}, "failed: it ran and failed"),
    el("option", {value: "not_executed"}, "not_executed: it never ran, free the key"));
  const result = el("textarea", {name: "result", id: "resolve-result", rows: 5, spellcheck: "false",
    placeholder: '{"message_id": "m-830"}'});
  const note = el("input", {name: "note", id: "resolve-note", type: "text", maxlength: 256,
    placeholder: "what the tool's own records say"});
  f.append(
    el("h3", {}, "Resolve a call"),
    el("p", {class: "muted small"}, "Settle it only after checking the tool's own records. Its holder, if any, is revoked."),
    el("div", {class: "field field-target"}, el("span", {class: "label"}, "Call"),
      el("output", {id: "resolve-target", class: "mono"}, "choose one in the list")),
    el("div", {class: "field field-resolution"}, el("label", {for: "resolve-resolution"}, "Resolution"), resolution),
    el("div", {class: "field field-result"}, el("label", {for: "resolve-result"}, "Result (JSON, optional)"), result,
      el("div", {id: "resolve-result-error", class: "field-error", hidden: true})),
    el("div", {class: "field field-note"}, el("label", {for: "resolve-note"}, "Note"), note),
    el("div", {class: "form-actions"}, el("button", {type: "submit", class: "primary"}, "Resolve")),
    el("div", {id: "resolve-answer", class: "answer", "aria-live": "polite"}),
  );
  resolution.addEventListener("change", () => syncResult(f));
  result.addEventListener("input", () => showResultError(f, ""));
  f.addEventListener("submit", (e) => {
    e.preventDefault();
    submit(f);
  });
  syncResult(f);
  return f;
}

// not_executed takes no result: the field is disabled so nobody thinks it is kept.
function syncResult(f) {
  const notExecuted = f.elements.resolution.value === "not_executed";
  f.elements.result.disabled = notExecuted;
  if (notExecuted) showResultError(f, "");
}

function showResultError(f, message) {
  const box = f.querySelector("#resolve-result-error");
  box.textContent = message;
  box.hidden = message === "";
  f.elements.result.classList.toggle("invalid", message !== "");
  f.elements.result.setAttribute("aria-invalid", message !== "" ? "true" : "false");
}

function choose(rid, cid, tool) {
  target = {rid, cid};
  form.querySelector("#resolve-target").textContent = rid + ":" + cid + (tool ? " (" + tool + ")" : "");
  clear(form.querySelector("#resolve-answer"));
  markTarget();
  form.scrollIntoView({block: "nearest", behavior: "smooth"});
  form.elements.resolution.focus({preventScroll: true});
}

function markTarget() {
  for (const tr of document.querySelectorAll("#unknown tbody tr")) {
    tr.classList.toggle("selected", target !== null && tr.getAttribute("data-key") === target.rid + ":" + target.cid);
  }
}

/** The body to send, or a message saying why nothing may be sent. */
function resolveBody(f) {
  const resolution = f.elements.resolution.value;
  const body = {resolution};
  if (resolution !== "not_executed") {
    const text = f.elements.result.value.trim();
    if (text !== "") {
      try {
        body.result = JSON.parse(text);
      } catch (e) {
        return {error: "The result is not JSON: " + (e && e.message ? e.message : "it does not parse")};
      }
    }
  }
  const note = f.elements.note.value;
  if (note !== "") body.note = note;
  return {body};
}

async function submit(f) {
  const answer = f.querySelector("#resolve-answer");
  if (!target) {
    fillAnswer(answer, "not sent", "Choose a call in the list first.", false);
    return;
  }
  const {body, error} = resolveBody(f);
  if (error) {
    showResultError(f, error);
    fillAnswer(answer, "not sent", error, false);
    f.elements.result.focus();
    return;
  }
  showResultError(f, "");
  const {rid, cid} = target;
  const button = f.querySelector('button[type="submit"]');
  button.disabled = true;
  let status = 0;
  let reply = null;
  try {
    ({status, body: reply} = await send("POST", requestPath(rid) + "/tool-calls/" + encodeURIComponent(cid) +
      "/resolve", body));
  } catch {
    fillAnswer(answer, "0", "ledgerd did not answer", false);
    return;
  } finally {
    button.disabled = false;
  }
  fillAnswer(answer, String(status), JSON.stringify(reply, null, 2), status >= 200 && status < 300);
  if (status >= 200 && status < 300) {
    target = null;
    f.querySelector("#resolve-target").textContent = rid + ":" + cid + " settled; choose another";
  }
  // Settled or refused (already completed by someone else, say), the list
  // may have changed either way.
  showUnknown();
}

function fillAnswer(box, status, text, ok) {
  clear(box);
  box.className = "answer " + (ok ? "ok" : "bad");
  box.append(el("div", {class: "answer-status"}, el("span", {class: "answer-code"}, status)),
    el("pre", {class: "answer-body"}, text));
}
