// requests.js: the tenant's requests, newest first (#/requests).
//
// The filters live in the hash (#/requests?status=failed&attention=1), so a
// view can be shared and survives a reload. The API pages by an opaque
// keyset cursor that only goes forward; "previous" is a stack of the
// cursors that led here, dropped whenever the filters change.

import {get, query, serverNow} from "./api.js";
import {attentionBadges, clientErrorCode, clientErrorMessage, pill} from "./badges.js";
import {ago, cell, clear, el, isId, parseTime, requestHref} from "./dom.js";

const PAGE_SIZE = 50;
const STATUSES = ["open", "completed", "failed", "terminated", "abandoned"];

let filters = {status: "", attention: false};
let cursors = [null]; // cursors[i]: the cursor of page i (null: the first)
let nextCursor = null;
let loading = 0; // generation of the newest load, so a slow answer never overwrites a newer one

/** The filters a hash query asks for; unknown values fall back to "all". */
export function parseFilters(params) {
  const status = params.get("status") || "";
  return {
    status: STATUSES.includes(status) ? status : "",
    attention: params.get("attention") === "1",
  };
}

function filtersHash(f) {
  const q = new URLSearchParams();
  if (f.status) q.set("status", f.status);
  if (f.attention) q.set("attention", "1");
  const s = q.toString();
  return "#/requests" + (s ? "?" + s : "");
}

/** Wires the filter controls and pager once, at start-up. */
export function setupRequests() {
  const status = document.getElementById("status-filter");
  const attention = document.getElementById("attention-filter");
  const onChange = () => {
    location.hash = filtersHash({status: status.value, attention: attention.checked});
  };
  status.addEventListener("change", onChange);
  attention.addEventListener("change", onChange);
  document.getElementById("next-page").addEventListener("click", () => {
    if (nextCursor === null) return;
    cursors.push(nextCursor);
    load();
  });
  document.getElementById("prev-page").addEventListener("click", () => {
    if (cursors.length < 2) return;
    cursors.pop();
    load();
  });
  document.getElementById("requests-reload").addEventListener("click", () => load());
}

/** Shows the view for @f: the first page again when the filters changed. */
export function showRequests(f) {
  if (f.status !== filters.status || f.attention !== filters.attention) {
    filters = f;
    cursors = [null];
  }
  document.getElementById("status-filter").value = filters.status;
  document.getElementById("attention-filter").checked = filters.attention;
  return load();
}

async function load() {
  const generation = ++loading;
  const cursor = cursors[cursors.length - 1];
  setPager(false, false, "loading…");
  let page;
  try {
    page = await get("/v1/requests" + query({
      status: filters.status,
      attention: filters.attention ? "true" : "",
      limit: PAGE_SIZE,
      cursor,
    }));
  } catch {
    if (generation === loading) setPager(cursors.length > 1, false, "");
    return; // the error banner says why
  }
  if (generation !== loading) return;
  const items = Array.isArray(page && page.items) ? page.items : [];
  nextCursor = page && typeof page.next_cursor === "string" ? page.next_cursor : null;
  renderRows(items);
  const first = (cursors.length - 1) * PAGE_SIZE + 1;
  setPager(cursors.length > 1, nextCursor !== null,
    items.length === 0 ? "" : "page " + cursors.length + " · " + first + "–" + (first + items.length - 1));
}

function setPager(prev, next, info) {
  document.getElementById("prev-page").disabled = !prev;
  document.getElementById("next-page").disabled = !next;
  document.getElementById("page-info").textContent = info;
}

function renderRows(items) {
  const tbody = clear(document.querySelector("#requests tbody"));
  const now = serverNow();
  for (const r of items) tbody.appendChild(row(r, now));
  document.getElementById("requests-empty").hidden = items.length !== 0;
}

function row(r, now) {
  const rid = String(r.request_id);
  const tr = el("tr", {"data-request-id": rid});
  if (Array.isArray(r.attention) && r.attention.length > 0) tr.classList.add("needs-attention");
  // An id the API would never give is shown but not linked.
  const link = isId(rid) ? el("a", {href: requestHref(rid)}, rid) : rid;
  const created = parseTime(r.created_at);
  const code = clientErrorCode(r.client_error);
  tr.append(
    cell("request-id mono", link),
    cell("status", pill("status", r.status)),
    cell("phase", r.phase),
    cell("attempts num", r.attempts, {title: "of at most " + r.max_attempts}),
    cell("tokens num", r.delivered_output_tokens, {title: "delivered output tokens"}),
    cell("client-error mono", code, {title: clientErrorMessage(r.client_error)}),
    cell("attention", attentionBadges(r.attention)),
    cell("created-at mono", r.created_at, {title: ago(created, now)}),
  );
  return tr;
}
