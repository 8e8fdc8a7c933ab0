// request.js: one request (#/request/<id>): its summary, its timeline, its
// attempts, its tool calls and its whole history.
//
// GET /v1/requests/{rid} gives the first 1,000 events and a cursor for the
// rest; every page is fetched before anything is drawn, so the timeline is
// never drawn from half a history. The attempts and calls of the last page
// are used: its snapshot is the newest, the one the last events agree with.

import {get, requestPath, serverNow, query} from "./api.js";
import {attentionBadges, clientErrorCode, clientErrorMessage, pill} from "./badges.js";
import {cell, clear, compactJson, duration, el, fill, isoTime, parseTime, svgEl} from "./dom.js";
import {buildModel} from "./timeline-model.js";
import {drawTimeline} from "./timeline.js";

const MAX_PAGES = 200; // 200,000 events: past that the page would not be readable anyway

let current = null; // {rid, view}: what is on screen, for redraws on resize
let loading = 0;
let zoom = null;    // {lo, hi}: the window of time the timeline shows, or null for all
let scale = null;   // the scale of the timeline on screen (timeline.js)
let linear = false; // true proportions: no idle gap drawn short

export function setupRequest() {
  document.getElementById("request-reload").addEventListener("click", () => {
    if (current) showRequest(current.rid);
  });
  // A click on a bar or mark finds its event in the history table.
  const svg = document.getElementById("timeline");
  svg.addEventListener("click", (e) => {
    const mark = e.target instanceof Element ? e.target.closest("[data-event-seq]") : null;
    if (mark) highlightEvent(mark.getAttribute("data-event-seq"));
  });
  setupBrush(svg);
  document.getElementById("timeline-reset").addEventListener("click", () => setZoom(null));
  document.getElementById("timeline-linear").addEventListener("change", (e) => {
    linear = e.target.checked;
    redraw();
  });
  let pending = 0;
  window.addEventListener("resize", () => {
    clearTimeout(pending);
    pending = setTimeout(redraw, 120);
  });
}

/** Loads and shows request @rid (an id already checked by the router). */
export async function showRequest(rid) {
  const generation = ++loading;
  if (!current || current.rid !== rid) {
    blank(rid);
    zoom = null;
  }
  let view;
  try {
    view = await fetchAll(rid, () => generation === loading);
  } catch {
    return; // the error banner says why
  }
  if (!view || generation !== loading) return;
  current = {rid, view};
  render(view);
}

async function fetchAll(rid, stillWanted) {
  let view = await get(requestPath(rid));
  const events = Array.isArray(view.events) ? view.events.slice() : [];
  let cursor = view.next_events_cursor;
  for (let page = 1; typeof cursor === "string" && cursor !== "" && page < MAX_PAGES; page++) {
    if (!stillWanted()) return null;
    view = await get(requestPath(rid) + query({events_cursor: cursor}));
    if (Array.isArray(view.events)) events.push(...view.events);
    cursor = view.next_events_cursor;
  }
  return Object.assign({}, view, {events});
}

// A new request: nothing of the previous one stays on screen while it loads.
function blank(rid) {
  current = null;
  document.getElementById("request-title").textContent = rid;
  clear(document.getElementById("request-status"));
  clear(document.getElementById("request-attention"));
  for (const dd of document.querySelectorAll("#request-summary dd")) dd.textContent = "";
  clear(document.getElementById("timeline"));
  document.getElementById("timeline-range").textContent = "loading…";
  for (const id of ["attempts", "tool-calls", "events"]) clear(document.querySelector("#" + id + " tbody"));
  document.getElementById("events-count").textContent = "";
}

function render(view) {
  const r = view.request || {};
  document.getElementById("request-title").textContent = String(r.request_id ?? current.rid);
  fill(document.getElementById("request-status"), pill("status", r.status));
  fill(document.getElementById("request-attention"), attentionBadges(r.attention));
  renderSummary(r);
  redraw();
  renderAttempts(view.attempts);
  renderCalls(view.tool_calls, view.events);
  renderEvents(view.events);
}

function renderSummary(r) {
  const set = (field, value, title) => {
    const dd = document.querySelector('#request-summary dd[data-field="' + field + '"]');
    dd.textContent = value === null || value === undefined ? "" : String(value);
    if (title) dd.setAttribute("title", title);
    else dd.removeAttribute("title");
  };
  set("status", r.status);
  set("phase", r.phase);
  set("first_delta_sent", r.first_delta_sent);
  set("delivered_output_tokens", r.delivered_output_tokens);
  set("attempts", r.attempts);
  set("max_attempts", r.max_attempts);
  set("model_revision", r.model_revision);
  set("client_error", clientErrorCode(r.client_error), clientErrorMessage(r.client_error));
  set("created_at", r.created_at);
}

// The timeline is drawn to the width it has, again whenever that changes.
function redraw() {
  if (!current) return;
  const view = current.view;
  const svg = document.getElementById("timeline");
  const wrap = document.getElementById("timeline-wrap");
  const width = Math.max(wrap.clientWidth, 900);
  const model = buildModel(view, serverNow());
  scale = drawTimeline(svg, model, width, zoom, linear);
  const range = document.getElementById("timeline-range");
  if (zoom) {
    range.textContent = "zoomed to " + isoTime(zoom.lo) + " → " + isoTime(zoom.hi) + " · " + duration(zoom.hi - zoom.lo);
  } else {
    range.textContent = isoTime(model.tMin) + " → " + (model.open ? "now " : "") + isoTime(model.tEnd) +
      " · " + duration(model.tEnd - model.tMin);
  }
  document.getElementById("timeline-reset").hidden = zoom === null;
}

function setZoom(z) {
  zoom = z;
  redraw();
}

// Dragging across the plot (not on a mark) zooms into that stretch of
// time; a double click or "Show all" goes back. Bursts of events a few ms
// apart are common in a failover and unreadable at the scale of minutes.
function setupBrush(svg) {
  let from = null;
  let box = null;
  const px = (e) => e.clientX - svg.getBoundingClientRect().left;
  svg.addEventListener("pointerdown", (e) => {
    if (!scale || e.button !== 0) return;
    if (e.target instanceof Element && e.target.closest("[data-event-seq]")) return;
    const at = px(e);
    if (at < scale.x0 || at > scale.x1) return;
    from = at;
    box = svgEl("rect", {class: "brush", x: at, y: 0, width: 0, height: svg.getAttribute("height")});
    svg.appendChild(box);
    svg.setPointerCapture(e.pointerId);
  });
  svg.addEventListener("pointermove", (e) => {
    if (from === null) return;
    const at = Math.min(Math.max(px(e), scale.x0), scale.x1);
    box.setAttribute("x", String(Math.min(from, at)));
    box.setAttribute("width", String(Math.abs(at - from)));
  });
  const end = (e) => {
    if (from === null) return;
    const at = Math.min(Math.max(px(e), scale.x0), scale.x1);
    const [a, b] = [Math.min(from, at), Math.max(from, at)];
    from = null;
    box.remove();
    box = null;
    if (b - a < 6) return; // a click, not a drag
    const lo = scale.invert(a);
    const hi = scale.invert(b);
    setZoom({lo, hi: Math.max(hi, lo + 2)});
  };
  svg.addEventListener("pointerup", end);
  svg.addEventListener("pointercancel", () => {
    from = null;
    if (box) box.remove();
    box = null;
  });
  svg.addEventListener("dblclick", () => {
    if (zoom) setZoom(null);
  });
}

function renderAttempts(attempts) {
  const tbody = clear(document.querySelector("#attempts tbody"));
  const sorted = (Array.isArray(attempts) ? attempts.slice() : []).sort((a, b) => (a.epoch || 0) - (b.epoch || 0));
  for (const a of sorted) {
    tbody.appendChild(el("tr", {"data-attempt-id": a.attempt_id},
      cell("attempt-id mono", a.attempt_id),
      cell("epoch num", a.epoch),
      cell("replica mono", a.replica),
      cell("gateway mono", a.gateway),
      cell("model-revision mono", a.model_revision),
      cell("state", pill("attempt", a.state), a.lease_ms_left > 0 ? {title: duration(a.lease_ms_left) + " of lease left"} : null),
      cell("tokens num", a.delivered_output_tokens),
      cell("retry", a.retry ? "retry" : ""),
      cell("created-at mono", a.created_at),
      cell("ended-at mono", a.ended_at),
    ));
  }
  if (sorted.length === 0) tbody.appendChild(el("tr", {class: "empty-row"}, el("td", {colspan: 10}, "No attempt: a router never ran this request.")));
}

// The holder of a call is in the call only while it is held; once final,
// the last claim in the history says who held it.
function lastClaims(events) {
  const claims = new Map();
  for (const e of events || []) {
    if (e.type === "claimed" && typeof e.tool_call_id === "string") claims.set(e.tool_call_id, e);
  }
  return claims;
}

function renderCalls(calls, events) {
  const tbody = clear(document.querySelector("#tool-calls tbody"));
  const claims = lastClaims(events);
  for (const c of Array.isArray(calls) ? calls : []) {
    const cid = String(c.tool_call_id);
    const claim = claims.get(cid);
    const holder = c.holder && typeof c.holder === "object" ? c.holder : null;
    const attempt = holder ? holder.attempt_id : claim ? claim.attempt_id : null;
    const owner = holder ? holder.owner : claim && claim.detail ? claim.detail.owner : null;
    const tr = el("tr", {"data-tool-call-id": cid},
      cell("tool-call-id mono", cid),
      cell("tool mono", c.tool),
      cell("state", pill("call", c.state), c.lease_ms_left > 0 ? {title: duration(c.lease_ms_left) + " of lease left"} : null),
      cell("attempt mono", attempt),
      cell("owner mono", owner),
      cell("fencing-token num", c.fencing_token),
      cell("outcome", c.outcome),
      cell("created-at mono", c.created_at),
      cell("completed-at mono", c.completed_at),
    );
    if (c.state === "unknown") tr.classList.add("needs-attention");
    tbody.appendChild(tr);
  }
  if (!Array.isArray(calls) || calls.length === 0) {
    tbody.appendChild(el("tr", {class: "empty-row"}, el("td", {colspan: 9}, "No tool call.")));
  }
}

// The kind of an event, for its colour in the history.
function eventKind(type) {
  if (type === "refused" || type === "duplicate_execution" || type === "resolve_contradicted") return "bad";
  if (type === "late_completion" || type === "attempt_revoked" || type === "attempt_cancel_requested") return "warn";
  if (type === "failover_decision" || type === "first_delta" || type === "resolved") return "key";
  return "plain";
}

function renderEvents(events) {
  const tbody = clear(document.querySelector("#events tbody"));
  const list = Array.isArray(events) ? events : [];
  const t0 = list.length ? parseTime(list[0].at) : NaN;
  for (const e of list) {
    const t = parseTime(e.at);
    tbody.appendChild(el("tr", {"data-seq": e.seq, class: "ev-" + eventKind(e.type)},
      cell("seq num mono", e.seq),
      cell("at mono", e.at),
      cell("rel num mono", Number.isFinite(t - t0) ? "+" + duration(t - t0) : ""),
      cell("type", el("span", {class: "ev-type"}, String(e.type))),
      cell("attempt mono", e.attempt_id),
      cell("tool-call mono", e.tool_call_id),
      cell("detail mono", compactJson(e.detail)),
    ));
  }
  document.getElementById("events-count").textContent = list.length + (list.length === 1 ? " event" : " events");
}

function highlightEvent(seq) {
  for (const row of document.querySelectorAll("#events tr.flash")) row.classList.remove("flash");
  const row = [...document.querySelectorAll("#events tr[data-seq]")].find((r) => r.getAttribute("data-seq") === seq);
  if (!row) return;
  row.classList.add("flash");
  row.scrollIntoView({block: "center", behavior: "smooth"});
}
