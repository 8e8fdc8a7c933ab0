// timeline-model.js: a request's history turned into what the timeline
// draws: one lane per attempt (epoch order) and one for calls held by no
// attempt, the lease of each attempt, one bar per holding of a tool call,
// and the marks (fences, refusals, failover decisions, late completions,
// resolutions, the point of no retry). Pure: data in, data out, no DOM.
//
// A holding runs from its `claimed` event to the event that ended it:
//
//   claimed ──completed────────────▶ outcome       (its own final word)
//      │    ──released─────────────▶ released
//      │    ──late_completion──────▶ outcome       (after its lease or fence)
//      │    ──resolved─────────────▶ previous_state (an operator took it away)
//      │    ──claimed (next holder)▶ unknown       (its lease had run out)
//      │    ──late_completion of an older holder▶ that outcome
//      └────(nothing yet)──────────▶ the call's state now, running to now
//
// Completions name the holder by fencing token, so a late completion lands
// on the holding it belongs to even after the key changed hands.

import {parseTime} from "./dom.js";

// Attempt states in which an attempt may still act or still blocks the next.
const STILL_RUNNING = new Set(["live", "expired", "cancel_requested"]);
// The attempt events after which it has no rights any more.
const ATTEMPT_END_EVENTS = new Set(["attempt_revoked", "attempt_cancelled", "attempt_finished"]);

/**
 * Builds the model of @view (the GET /v1/requests/{rid} answer, every page
 * of events joined) at @now (ms, the database's clock as best known).
 */
export function buildModel(view, now) {
  const attempts = (Array.isArray(view.attempts) ? view.attempts.slice() : [])
    .sort((a, b) => (a.epoch || 0) - (b.epoch || 0));
  const calls = new Map((Array.isArray(view.tool_calls) ? view.tool_calls : [])
    .map((c) => [String(c.tool_call_id), c]));
  const events = (Array.isArray(view.events) ? view.events : [])
    .filter((e) => Number.isFinite(parseTime(e.at)));
  const request = view.request || {};

  const m = {
    request,
    lanes: [],
    laneById: new Map(),
    noAttemptLane: null,
    firstDelta: null,
    statusMarks: [],
    links: [],
    tMin: NaN,
    tLast: NaN,
    now,
    open: false,
  };
  for (const a of attempts) addLane(m, String(a.attempt_id), a);

  const holds = new Map(); // tool_call_id -> {holdings: [], open: holding|null}
  for (const ev of events) applyEvent(m, holds, calls, ev);

  m.open = request.status === "open" ||
    [...calls.values()].some((c) => c.state === "in_progress" || c.state === "unknown");
  closeOpenHoldings(m, holds, calls);
  finishLeases(m, attempts, events);
  computeExtent(m, attempts, events);
  if (m.noAttemptLane) m.lanes.push(m.noAttemptLane); // always last, under the attempts
  return m;
}

function addLane(m, id, attempt) {
  const lane = {
    id,
    attempt,
    holdings: [],
    marks: [],   // refusals, failovers, contradictions: {kind, t, ev}
    fences: [],  // {t, cause, state, ev}
    lease: null, // {start, end, state}
    tail: null,  // {start, end}: revoked, but still blocking the next attempt
    createdAt: attempt ? parseTime(attempt.created_at) : NaN,
  };
  m.lanes.push(lane);
  m.laneById.set(id, lane);
  return lane;
}

// The lane of attempt @aid; calls and refusals of no (known) attempt go to
// the no-attempt lane, made the first time one needs it.
function laneFor(m, aid) {
  if (aid && m.laneById.has(aid)) return m.laneById.get(aid);
  if (!m.noAttemptLane) {
    m.noAttemptLane = {id: "", attempt: null, holdings: [], marks: [], fences: [], lease: null, tail: null};
  }
  return m.noAttemptLane;
}

function callHolds(holds, cid) {
  if (!holds.has(cid)) holds.set(cid, {holdings: [], open: null});
  return holds.get(cid);
}

// The holding whose fencing token is @token, newest first; else @fallback.
function byToken(h, token, fallback) {
  for (let i = h.holdings.length - 1; i >= 0; i--) {
    if (h.holdings[i].token === token) return h.holdings[i];
  }
  return fallback;
}

function endHolding(h, holding, t, state, endedBy, ev) {
  if (!holding || holding.end !== null) return;
  holding.end = t;
  holding.state = state;
  holding.endedBy = endedBy;
  holding.endEvent = ev;
  if (h.open === holding) h.open = null;
}

function applyEvent(m, holds, calls, ev) {
  const t = parseTime(ev.at);
  const d = ev.detail && typeof ev.detail === "object" ? ev.detail : {};
  const aid = typeof ev.attempt_id === "string" ? ev.attempt_id : "";
  const cid = typeof ev.tool_call_id === "string" ? ev.tool_call_id : "";
  if (!Number.isFinite(m.tMin) || t < m.tMin) m.tMin = t;
  if (!Number.isFinite(m.tLast) || t > m.tLast) m.tLast = t;

  switch (ev.type) {
    case "attempt_created": {
      const lane = m.laneById.get(aid);
      if (lane && !Number.isFinite(lane.createdAt)) lane.createdAt = t;
      break;
    }
    case "attempt_revoked":
      laneFor(m, aid).fences.push({t, cause: str(d.cause) || str(d.state) || "revoked", state: str(d.state), ev});
      break;
    case "attempt_cancel_requested":
      laneFor(m, aid).fences.push({t, cause: str(d.reason) || "cancel", state: "cancel_requested", ev});
      break;
    case "first_delta":
      if (!m.firstDelta) m.firstDelta = {t, aid, tokens: d.delivered_output_tokens, ev};
      break;
    case "request_status":
      m.statusMarks.push({t, status: str(d.status), ev});
      break;
    case "failover_decision": {
      laneFor(m, aid).marks.push({kind: "failover", t, ev});
      if (typeof d.next_attempt_id === "string" && d.next_attempt_id !== "") {
        m.links.push({from: aid, to: d.next_attempt_id, t, ev});
      }
      break;
    }
    case "refused":
      laneFor(m, aid).marks.push({kind: "refused", t, ev});
      break;
    case "client_disconnected":
    case "client_resumed":
    case "client_hold_ended":
      // What the router (a gateway) saw of its client during the attempt.
      laneFor(m, aid).marks.push({kind: "client", t, ev});
      break;
    case "claimed": {
      const h = callHolds(holds, cid);
      endHolding(h, h.open, t, "unknown", "claimed", ev);
      const holding = {
        cid, aid, lane: laneFor(m, aid), start: t, end: null, state: null, endedBy: null,
        token: d.fencing_token, leaseMs: d.lease_ms, tool: str(d.tool) || str((calls.get(cid) || {}).tool),
        owner: str(d.owner), startEvent: ev, endEvent: null, late: [], resolved: null,
      };
      holding.lane.holdings.push(holding);
      h.holdings.push(holding);
      h.open = holding;
      break;
    }
    case "completed": {
      const h = callHolds(holds, cid);
      endHolding(h, byToken(h, d.fencing_token, h.open), t, str(d.outcome) || "succeeded", "completed", ev);
      break;
    }
    case "released": {
      const h = callHolds(holds, cid);
      endHolding(h, byToken(h, d.fencing_token, h.open), t, "released", "released", ev);
      break;
    }
    case "late_completion": {
      const h = callHolds(holds, cid);
      const holding = byToken(h, d.fencing_token, h.open);
      const outcome = str(d.outcome) || "succeeded";
      endHolding(h, holding, t, outcome, "late_completion", ev);
      // An accepted late report is the call's outcome: a newer holder's
      // claim ends with it, whatever that holder does next.
      if (h.open && h.open !== holding) endHolding(h, h.open, t, outcome, "completed_by_older", ev);
      placeOnHolding(m, holding, aid, {kind: "late", t, ev, cid});
      break;
    }
    case "resolved": {
      const h = callHolds(holds, cid);
      const holding = h.open || h.holdings[h.holdings.length - 1] || null;
      endHolding(h, h.open, t, str(d.previous_state) || "unknown", "resolved", ev);
      placeOnHolding(m, holding, aid, {kind: "resolved", t, ev, cid});
      break;
    }
    case "resolve_contradicted":
    case "duplicate_execution": {
      const h = callHolds(holds, cid);
      const holding = byToken(h, d.fencing_token, null);
      laneFor(m, holding ? holding.aid : aid).marks.push({kind: "contradiction", t, ev, cid});
      break;
    }
    default:
      break; // attempt_cancelled, attempt_finished: they end a lease (finishLeases)
  }
}

// Late completions and resolutions sit on the bar of the holding they
// concern; one without a holding on record sits on its attempt's lane.
function placeOnHolding(m, holding, aid, mark) {
  if (holding) holding.late.push(mark);
  else laneFor(m, aid).marks.push(mark);
}

// Holdings nobody ended yet run to now in the call's current state; on a
// final call without its closing event (a page of history cut short) they
// stop at the last event.
function closeOpenHoldings(m, holds, calls) {
  for (const [cid, h] of holds) {
    const holding = h.open;
    if (!holding) continue;
    const call = calls.get(cid);
    const state = call ? str(call.state) : "in_progress";
    const running = state === "in_progress" || state === "unknown";
    holding.end = running ? Math.max(m.now, holding.start) : m.tLast;
    holding.state = state || "in_progress";
    holding.endedBy = running ? "now" : "unrecorded";
    holding.stillOpen = running;
  }
  // A holding's lease ran out before its end when nothing but a late word,
  // an operator or a new holder closed it: that stretch is drawn hatched.
  for (const lane of [...m.lanes, m.noAttemptLane].filter(Boolean)) {
    for (const holding of lane.holdings) {
      const lapsedEnd = ["late_completion", "resolved", "claimed"].includes(holding.endedBy) ||
        (holding.stillOpen && holding.state === "unknown");
      const lapse = holding.start + (Number.isFinite(holding.leaseMs) ? holding.leaseMs : NaN);
      holding.lapseAt = lapsedEnd && lapse < holding.end ? lapse : null;
    }
  }
}

// An attempt holds its rights from its creation to ended_at (or the first
// event that ended them, or now). A revoked attempt whose cancel is not
// acknowledged still blocks the next one: that stretch is its tail, up to
// the event that ended it for good, or now while the request is open.
function finishLeases(m, attempts, events) {
  for (const a of attempts) {
    const lane = m.laneById.get(String(a.attempt_id));
    const own = events.filter((e) => e.attempt_id === a.attempt_id);
    const endEvent = own.find((e) => ATTEMPT_END_EVENTS.has(e.type));
    const start = Number.isFinite(lane.createdAt) ? lane.createdAt : m.tMin;
    let end = parseTime(a.ended_at);
    if (!Number.isFinite(end) && endEvent) end = parseTime(endEvent.at);
    // Still running (or expired, which is never stored): up to now while
    // the request is open; a closed request's history ends with its last event.
    if (!Number.isFinite(end)) end = STILL_RUNNING.has(a.state) && m.open ? Math.max(m.now, start) : m.tLast;
    lane.lease = {start, end: Math.max(end, start), state: str(a.state)};

    const cancelled = own.find((e) => (e.type === "attempt_revoked" && e.detail && e.detail.state === "cancel_requested") ||
      e.type === "attempt_cancel_requested");
    if (!cancelled) continue;
    const from = parseTime(cancelled.at);
    const until = own.find((e) => parseTime(e.at) >= from && e !== cancelled &&
      (e.type === "attempt_cancelled" || e.type === "attempt_finished" ||
       (e.type === "attempt_revoked" && (!e.detail || e.detail.state !== "cancel_requested"))));
    let tailEnd = until ? parseTime(until.at) : NaN;
    if (!Number.isFinite(tailEnd)) tailEnd = a.state === "cancel_requested" && m.request.status === "open" ? m.now : NaN;
    if (Number.isFinite(tailEnd) && tailEnd > lane.lease.end) {
      lane.tail = {start: lane.lease.end, end: tailEnd, until};
    }
  }
}

// From the first event to the last, or to now while something is open.
function computeExtent(m, attempts, events) {
  for (const a of attempts) {
    for (const t of [parseTime(a.created_at), parseTime(a.ended_at)]) {
      if (!Number.isFinite(t)) continue;
      if (!Number.isFinite(m.tMin) || t < m.tMin) m.tMin = t;
      if (!Number.isFinite(m.tLast) || t > m.tLast) m.tLast = t;
    }
  }
  if (!Number.isFinite(m.tMin)) {
    const created = parseTime(m.request.created_at);
    m.tMin = Number.isFinite(created) ? created : m.now;
    m.tLast = m.tMin;
  }
  m.tEnd = m.open ? Math.max(m.tLast, m.now) : m.tLast;
  m.events = events;
}

function str(v) {
  return typeof v === "string" ? v : v === null || v === undefined ? "" : String(v);
}
