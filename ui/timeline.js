// timeline.js: draws a request's timeline model (timeline-model.js) as SVG.
//
// Time runs left to right in UTC (timescale.js: long idle gaps drawn as
// short, labelled breaks); one lane per attempt, in epoch order, and one
// for calls held by no attempt, under the request's own strip.
// Every bar and mark carries a <title> (the browser's tooltip) saying what
// it is and when, and data-event-seq naming the event it comes from.

import {clear, clockTime, compactJson, duration, isoTime, svgEl} from "./dom.js";
import {stateWord} from "./badges.js";
import {makeScale} from "./timescale.js";

const GUTTER = 196;    // lane labels
const RIGHT = 24;
const AXIS_H = 34;     // tick labels and their offsets
const STRIP_H = 26;    // the request's own strip
const MARK_ROW = 18;   // refusals, failovers, contradictions, above the bars
const TRACK_H = 18;    // one row of tool-call bars
const BAR_H = 13;
const LANE_MIN_H = 50; // two lines of label
const CHAR_W = 6.4;    // average width of a character at the labels' size
const ID_CHARS = 24;   // characters of an attempt id per line of its label
const LABEL_LINE = 15;

const STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5,
  6e5, 9e5, 18e5, 36e5, 72e5, 108e5, 216e5, 432e5, 864e5];

/**
 * Draws @model into @svg, @width pixels wide, showing the window @zoom
 * ({lo, hi} in ms) or everything when it is null, with long idle gaps
 * drawn short unless @linear. Returns the scale, whose invert(px) turns a
 * position back into a time (for the zoom brush).
 */
export function drawTimeline(svg, model, width, zoom, linear) {
  clear(svg);
  const x = makeScale({points: moments(model), tMin: model.tMin, tEnd: model.tEnd, x0: GUTTER,
    x1: width - RIGHT, zoom, linear, openEnd: model.open});
  const lanes = layoutLanes(model, x);
  const height = lanes.length ? lanes[lanes.length - 1].top + lanes[lanes.length - 1].height + 8
    : AXIS_H + STRIP_H + 8;
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
  svg.setAttribute("viewBox", "0 0 " + width + " " + height);

  svg.appendChild(defs(x, height));
  svg.appendChild(laneBackgrounds(lanes, width));
  svg.appendChild(timeBreakBands(x, height));
  svg.appendChild(axis(model, x, height));
  svg.appendChild(requestStrip(model, x));
  for (const lane of lanes) svg.appendChild(drawLane(lane, x));
  svg.appendChild(timeBreakMarks(x));
  const over = svgEl("g", {class: "overlays", "clip-path": "url(#tl-clip)"});
  over.appendChild(links(model, lanes, x));
  if (model.firstDelta) over.appendChild(firstDelta(model.firstDelta, x, height));
  if (model.open) over.appendChild(nowLine(model, x, height));
  svg.appendChild(over);
  return x;
}

// --- scale and axis ---

// The moments the scale must show apart: every event, and every start and
// end the bars and leases are drawn from.
function moments(m) {
  const pts = m.events.map((e) => Date.parse(e.at));
  for (const lane of m.lanes) {
    if (lane.lease) pts.push(lane.lease.start, lane.lease.end);
    if (lane.tail) pts.push(lane.tail.end);
    for (const h of lane.holdings) pts.push(h.start, h.end, h.lapseAt ?? NaN);
  }
  return pts;
}

function tickStep(x) {
  return STEPS.find((s) => s * x.perMs >= 112) || STEPS[STEPS.length - 1];
}

// Ticks at round times within each linear stretch, labels kept apart from
// each other and from the breaks' own labels; a stretch too short for a
// round time gets its first moment labelled instead.
function axis(m, x, height) {
  const g = svgEl("g", {class: "axis"});
  const step = tickStep(x);
  const long = m.tEnd - m.tMin > 20 * 3600e3;
  const last = x.segments[x.segments.length - 1];
  const nowLabel = m.open && !x.zoomed && !last.gap; // a break to the end says "now" itself
  const taken = []; // centres of the labels placed so far
  const free = (px) => taken.every((c) => Math.abs(c - px) >= 96) &&
    (!nowLabel || px <= x.x1 - 130) && px >= x.x0 - 4 && px <= x.x1 + 4;
  const tick = (t, px) => {
    taken.push(px);
    g.appendChild(svgEl("line", {class: "grid-line", x1: px, x2: px, y1: AXIS_H - 4, y2: height - 4}));
    g.appendChild(svgEl("text", {class: "axis-label", x: px, y: 13, "text-anchor": "middle"},
      long ? isoTime(t).slice(5, 23).replace("T", " ") : clockTime(t)));
    g.appendChild(svgEl("text", {class: "axis-offset", x: px, y: 26, "text-anchor": "middle"}, offset(t - m.tMin)));
  };
  for (const seg of x.segments.filter((sg) => sg.gap)) taken.push(seg.toEnd ? seg.x1 - 40 : (seg.x0 + seg.x1) / 2);
  const pts = moments(m).filter(Number.isFinite).sort((a, b) => a - b);
  for (const seg of x.segments.filter((sg) => !sg.gap)) {
    let placed = 0;
    for (let t = Math.ceil(seg.t0 / step) * step; t <= seg.t1; t += step) {
      const px = x(t);
      if (free(px)) {
        tick(t, px);
        placed++;
      }
    }
    const firstMoment = pts.find((t) => t >= seg.t0 && t <= seg.t1);
    if (placed === 0 && firstMoment !== undefined && free(x(firstMoment))) tick(firstMoment, x(firstMoment));
  }
  g.appendChild(svgEl("text", {class: "axis-unit", x: 12, y: 13}, "UTC"));
  g.appendChild(svgEl("text", {class: "axis-unit muted", x: 12, y: 26}, "since first event"));
  if (nowLabel) {
    g.appendChild(svgEl("text", {class: "axis-label axis-now", x: x.x1, y: 13, "text-anchor": "end"},
      clockTime(m.tEnd)));
    g.appendChild(svgEl("text", {class: "axis-offset", x: x.x1, y: 26, "text-anchor": "end"}, "now"));
  }
  return g;
}

// Each break: a band across the lanes, drawn beneath them so that what
// crosses the gap (a long bar, its label) stays whole over it.
function timeBreakBands(x, height) {
  const g = svgEl("g", {class: "time-breaks"});
  for (const seg of x.segments.filter((sg) => sg.gap)) {
    g.appendChild(svgEl("rect", {class: "time-break", x: seg.x0, y: AXIS_H - 4, width: seg.x1 - seg.x0,
      height: height - AXIS_H}));
  }
  return g;
}

// And on the axis, a zigzag and how long the gap it stands for lasted.
function timeBreakMarks(x) {
  const g = svgEl("g", {class: "time-break-marks"});
  for (const seg of x.segments.filter((sg) => sg.gap)) {
    const mid = (seg.x0 + seg.x1) / 2;
    const zigzag = svgEl("path", {class: "axis-break",
      d: "M" + (mid - 15) + "," + (AXIS_H - 4) + " l5,-5 l5,10 l5,-10 l5,10 l5,-10 l5,5"});
    zigzag.appendChild(svgEl("title", {}, "nothing happened from " + isoTime(seg.t0) + " to " + isoTime(seg.t1) +
      " (" + duration(seg.t1 - seg.t0) + "): drawn short; tick \"linear time\" for true proportions"));
    g.appendChild(zigzag);
    g.appendChild(svgEl("text", {class: "axis-gap", x: seg.toEnd ? seg.x1 : mid, y: 17,
      "text-anchor": seg.toEnd ? "end" : "middle"}, duration(seg.t1 - seg.t0) + (seg.toEnd ? " → now" : "")));
  }
  return g;
}

// --- lanes ---

// Gives each lane its tracks (calls that overlap on screen go on separate
// rows) and its place from the top.
function layoutLanes(m, x) {
  let top = AXIS_H + STRIP_H;
  return m.lanes.map((lane, i) => {
    const tracks = [];
    const lastOnTrack = []; // the holding last put on each track, whose label may use the room after it
    const sorted = lane.holdings.slice().sort((a, b) => a.start - b.start);
    for (const h of sorted) {
      const x0 = x(h.start);
      let k = tracks.findIndex((end) => end + 3 <= x0);
      if (k < 0) {
        k = tracks.length;
        tracks.push(0);
      }
      // The row stays taken up to the holding's last mark, so a late
      // completion never seems to sit on the next holder's bar.
      const lastMark = h.late.reduce((t, mk) => Math.max(t, mk.t), h.end);
      tracks[k] = Math.max(x(lastMark) + 6, x0 + 4);
      if (lastOnTrack[k]) lastOnTrack[k].roomTo = x0;
      lastOnTrack[k] = h;
      h.track = k;
      h.roomTo = x.x1;
    }
    const labelH = 24 + (idLines(lane.id).length + (gatewayOf(lane.attempt) ? 1 : 0)) * LABEL_LINE;
    const height = Math.max(LANE_MIN_H, labelH, 4 + MARK_ROW + Math.max(1, tracks.length) * TRACK_H + 6);
    const laid = {lane, index: i, top, height};
    top += height;
    return laid;
  });
}

function laneBackgrounds(lanes, width) {
  const g = svgEl("g", {class: "lane-backgrounds"});
  for (const l of lanes) {
    g.appendChild(svgEl("rect", {class: "lane-bg" + (l.index % 2 ? " odd" : ""), x: 0, y: l.top,
      width, height: l.height}));
  }
  return g;
}

function drawLane(l, x) {
  const {lane, top, height} = l;
  const lanes = svgEl("g", {class: "lane", "data-attempt-id": lane.id});
  lanes.appendChild(laneLabel(lane, top));
  const g = svgEl("g", {class: "lane-plot", "clip-path": "url(#tl-clip)"});
  lanes.appendChild(g);
  if (lane.lease) g.appendChild(leaseRect(lane, top, height, x));
  if (lane.tail) g.appendChild(tailRect(lane, top, height, x));
  for (const h of lane.holdings) g.appendChild(holdingBar(h, top, x));
  for (const f of lane.fences) g.appendChild(fenceMark(lane, f, top, height, x));
  const markY = top + 4 + MARK_ROW / 2;
  for (const mark of lane.marks) g.appendChild(laneMark(mark, markY, x));
  for (const h of lane.holdings) {
    for (const mark of h.late) g.appendChild(holdingMark(h, mark, top, x));
  }
  return lanes;
}

function laneLabel(lane, top) {
  const a = lane.attempt;
  const label = svgEl("text", {class: "lane-label", x: 12, y: top + 19});
  if (a) {
    // The id is shown whole (ids are what operators search for), wrapped
    // over lines of its own; the replica may be cut, its tooltip is not.
    const id = svgEl("tspan", {class: "lane-id"});
    idLines(lane.id).forEach((part, i) => {
      id.appendChild(i === 0 ? svgEl("tspan", {}, part) : svgEl("tspan", {x: 12, dy: LABEL_LINE}, part));
    });
    label.appendChild(id);
    label.appendChild(svgEl("tspan", {class: "lane-sub", x: 12, dy: LABEL_LINE},
      clip(a.replica === null || a.replica === undefined ? "no replica" : String(a.replica), 18) +
      " · epoch " + a.epoch));
    const gateway = gatewayOf(a);
    if (gateway) {
      label.appendChild(svgEl("tspan", {class: "lane-sub lane-gateway", x: 12, dy: LABEL_LINE},
        clip("via " + gateway, 26)));
    }
    label.appendChild(svgEl("title", {}, "attempt " + lane.id + " on " + (a.replica ?? "no replica") +
      ", epoch " + a.epoch + ", " + a.state + (gateway ? "\ngateway " + gateway : "") +
      (a.model_revision ? "\nmodel revision " + a.model_revision : "")));
  } else {
    label.appendChild(svgEl("tspan", {class: "lane-id"}, "no attempt"));
    label.appendChild(svgEl("tspan", {class: "lane-sub", x: 12, dy: LABEL_LINE}, "calls claimed without one"));
  }
  return label;
}

function leaseRect(lane, top, height, x) {
  const {start, end, state} = lane.lease;
  const a = lane.attempt;
  const r = svgEl("rect", {class: "lease", "data-state": state, x: x(start), y: top + 3,
    width: Math.max(x(end) - x(start), 2), height: height - 6, rx: 4});
  r.appendChild(svgEl("title", {}, "attempt " + lane.id + " on " + (a.replica ?? "no replica") +
    (gatewayOf(a) ? " via " + gatewayOf(a) : "") +
    ", epoch " + a.epoch + ": " + state + "\nrights from " + isoTime(start) + " to " + isoTime(end) +
    " (" + duration(end - start) + ")" + (a.ended_at ? "" : ", still running") +
    "\ndelivered output tokens " + a.delivered_output_tokens + (a.retry ? ", a retry" : "")));
  return r;
}

function tailRect(lane, top, height, x) {
  const {start, end, until} = lane.tail;
  const r = svgEl("rect", {class: "lease-fenced", x: x(start), y: top + 3,
    width: Math.max(x(end) - x(start), 1), height: height - 6, rx: 4});
  r.appendChild(svgEl("title", {}, "attempt " + lane.id + " revoked but not acknowledged: it still blocks " +
    "the next attempt\nfrom " + isoTime(start) + " to " + isoTime(end) +
    (until ? " (" + until.type + ")" : " (now)")));
  return r;
}

function holdingBar(h, laneTop, x) {
  const g = svgEl("g", {class: "holding"});
  const y = laneTop + 4 + MARK_ROW + h.track * TRACK_H;
  const x0 = x(h.start);
  const w = Math.max(x(h.end) - x0, 3);
  const bar = svgEl("rect", {class: "tool-call", "data-tool-call-id": h.cid, "data-attempt-id": h.aid,
    "data-state": h.state, "data-event-seq": h.startEvent.seq, x: x0, y, width: w, height: BAR_H, rx: 2});
  bar.appendChild(svgEl("title", {}, holdingTitle(h)));
  g.appendChild(bar);
  if (h.lapseAt !== null && h.lapseAt !== undefined) {
    const lx = x(h.lapseAt);
    g.appendChild(svgEl("rect", {class: "call-lapsed", x: lx, y, width: Math.max(x0 + w - lx, 1),
      height: BAR_H, rx: 2}));
  }
  // The label goes inside the bar when it fits, else after it when the
  // track is free there (a call of a few ms is a sliver at most scales).
  const full = h.cid + (h.tool ? " · " + h.tool : "");
  const inside = clip(full, Math.floor((w - 8) / CHAR_W));
  const after = x0 + w + (h.late.length ? 10 : 5);
  const outside = clip(full, Math.floor((h.roomTo - after - 6) / CHAR_W));
  const inLabel = () => svgEl("text", {class: "call-label call-label-" + stateWord(h.state), x: x0 + 4,
    y: y + BAR_H - 3}, inside);
  const outLabel = () => svgEl("text", {class: "call-label-outside", x: after, y: y + BAR_H - 3}, outside);
  if (inside === full) g.appendChild(inLabel());
  else if (outside === full) g.appendChild(outLabel());
  else if (inside.length >= 10) g.appendChild(inLabel());
  else if (outside.length >= 8) g.appendChild(outLabel());
  else if (inside.length >= 4) g.appendChild(inLabel());
  return g;
}

function holdingTitle(h) {
  const how = {
    completed: "completed",
    released: "released",
    late_completion: "completed late",
    resolved: "taken away by a resolution",
    claimed: "lease ran out; claimed again by a newer holder",
    completed_by_older: "completed by an older holder's late report",
    now: "still held",
    unrecorded: "no closing event on record",
  }[h.endedBy] || h.endedBy;
  const lines = [
    "tool call " + h.cid + (h.tool ? " (" + h.tool + ")" : "") + ", fencing token " + h.token,
    "held by " + (h.aid ? "attempt " + h.aid : "no attempt") + (h.owner ? ", owner " + h.owner : ""),
    "claimed " + isoTime(h.start) + (Number.isFinite(h.leaseMs) ? ", lease " + duration(h.leaseMs) : ""),
    how + " " + isoTime(h.end) + ": " + h.state + " (" + duration(h.end - h.start) + ")",
  ];
  const end = detailOf(h.endEvent);
  if (h.endedBy === "released" && (end.reason || end.outcome)) {
    lines.push(end.reason ? "reason: " + end.reason : "retryable " + end.outcome);
  }
  if (h.lapseAt) lines.push("lease ran out about " + isoTime(h.lapseAt) + " (renewals are not recorded)");
  return lines.join("\n");
}

// A cancel is a fence of its own only when no revocation tells the attempt's
// story: data-cause is always a cause the history gives for a revocation.
function fenceMark(lane, f, top, height, x) {
  const px = x(f.t);
  const cancel = f.ev.type === "attempt_cancel_requested";
  const revoked = lane.fences.some((o) => o.ev.type === "attempt_revoked");
  const line = svgEl("line", {class: cancel && revoked ? "mark-cancel" : "mark-fenced",
    "data-attempt-id": lane.id, "data-cause": f.cause,
    "data-event-seq": f.ev.seq, x1: px, x2: px, y1: top + 1, y2: top + height - 1});
  line.appendChild(svgEl("title", {}, "attempt " + lane.id + " " +
    (f.ev.type === "attempt_cancel_requested" ? "cancel requested" : "revoked") + " at " + isoTime(f.t) +
    ": " + f.cause + (f.state ? " → " + f.state : "")));
  return line;
}

function laneMark(mark, y, x) {
  const px = x(mark.t);
  const d = detailOf(mark.ev);
  if (mark.kind === "refused") {
    const c = svgEl("circle", {class: "mark-refused", "data-operation": d.operation ?? "",
      "data-code": d.code ?? "", "data-event-seq": mark.ev.seq, cx: px, cy: y, r: 5});
    c.appendChild(svgEl("title", {}, "refused " + (d.operation ?? "call") +
      (mark.ev.tool_call_id ? " of " + mark.ev.tool_call_id : "") + " at " + isoTime(mark.t) + ": " +
      (d.code ?? "") + "\n" + compactJson(d)));
    return c;
  }
  if (mark.kind === "failover") {
    const p = svgEl("path", {class: "mark-failover", "data-signal": d.signal ?? "", "data-action": d.action ?? "",
      "data-event-seq": mark.ev.seq, d: "M" + px + "," + (y - 7) + " l7,7 l-7,7 l-7,-7 z"});
    p.appendChild(svgEl("title", {}, failoverTitle(mark, d)));
    return p;
  }
  if (mark.kind === "client") return clientMark(mark, d, px, y);
  if (mark.kind === "contradiction") {
    const p = svgEl("path", {class: "mark-contradiction", "data-type": mark.ev.type, "data-event-seq": mark.ev.seq,
      d: "M" + px + "," + (y - 7) + " l7,13 l-14,0 z"});
    p.appendChild(svgEl("title", {}, mark.ev.type.replace("_", " ") + " of " + mark.cid + " at " +
      isoTime(mark.t) + ": the not_executed resolution was wrong" +
      (mark.ev.type === "duplicate_execution" ? "; the side effect may have run twice: check the tool" : "") +
      "\n" + compactJson(d)));
    return p;
  }
  return holdingMark(null, mark, y - 4 - MARK_ROW / 2, x, y);
}

// A client event (disconnected, resumed, hold_ended): a triangle pointing
// down when the client left, up when it came back, a bar when the hold ended.
function clientMark(mark, d, px, y) {
  const shape = {
    client_disconnected: "M" + (px - 6) + "," + (y - 5) + " l12,0 l-6,10 z",
    client_resumed: "M" + (px - 6) + "," + (y + 5) + " l12,0 l-6,-10 z",
  }[mark.ev.type] || "M" + (px - 1.5) + "," + (y - 6) + " l3,0 l0,12 l-3,0 z";
  const p = svgEl("path", {class: "mark-client", "data-type": mark.ev.type,
    "data-attempt-id": mark.ev.attempt_id ?? "", "data-event-seq": mark.ev.seq, d: shape});
  const what = {client_disconnected: "client disconnected", client_resumed: "client resumed",
    client_hold_ended: "hold ended: no client came back"}[mark.ev.type];
  p.appendChild(svgEl("title", {}, what + " at " + isoTime(mark.t) + " (n " + (d.n ?? "?") + ")" +
    (d.hold_ms !== undefined && d.hold_ms !== null ? "\nheld " + duration(d.hold_ms) : "") +
    (d.last_event_id !== undefined && d.last_event_id !== null ? "\nafter event " + d.last_event_id : "")));
  return p;
}

function failoverTitle(mark, d) {
  const lines = ["failover decision at " + isoTime(mark.t) + ": " + (d.signal ?? "?") + " → " + (d.action ?? "?")];
  if (d.source_state_after) lines.push("source attempt now " + d.source_state_after);
  if (d.request_status_after) lines.push("request " + d.request_status_after);
  if (d.client_error) lines.push("client error " + (typeof d.client_error === "string" ? d.client_error : compactJson(d.client_error)));
  if (d.retry_after_ms !== undefined && d.retry_after_ms !== null) lines.push("retry after " + duration(d.retry_after_ms));
  if (d.next_attempt_id) lines.push("next attempt " + d.next_attempt_id);
  if (d.reason) lines.push("reason " + d.reason);
  if (d.inputs !== undefined) lines.push("inputs " + compactJson(d.inputs));
  return lines.join("\n");
}

// A late completion or a resolution, on the bar of the holding it concerns
// (@h), or on the mark row at @rowY when there is none.
function holdingMark(h, mark, laneTop, x, rowY) {
  const px = x(mark.t);
  const y = h ? laneTop + 4 + MARK_ROW + h.track * TRACK_H + BAR_H / 2 : rowY;
  const d = detailOf(mark.ev);
  if (mark.kind === "late") {
    const c = svgEl("circle", {class: "mark-late-completion", "data-tool-call-id": mark.cid,
      "data-event-seq": mark.ev.seq, cx: px, cy: y, r: 5});
    c.appendChild(svgEl("title", {}, "late completion of " + mark.cid + " at " + isoTime(mark.t) + ": " +
      (d.outcome ?? "?") + " from fencing token " + d.fencing_token +
      (d.current_token !== undefined ? " (current token " + d.current_token + ")" : "") +
      (d.previous_state ? ", was " + d.previous_state : "")));
    return c;
  }
  const r = svgEl("rect", {class: "mark-resolved", "data-tool-call-id": mark.cid, "data-event-seq": mark.ev.seq,
    x: px - 4.5, y: y - 4.5, width: 9, height: 9, rx: 1.5});
  r.appendChild(svgEl("title", {}, "resolved " + mark.cid + " as " + (d.resolution ?? "?") + " at " +
    isoTime(mark.t) + (d.previous_state ? " (was " + d.previous_state + ")" : "") +
    (d.note ? "\nnote: " + d.note : "")));
  return r;
}

// --- the request strip and the marks across lanes ---

function requestStrip(m, x) {
  const strip = svgEl("g", {class: "request-strip"});
  const top = AXIS_H;
  strip.appendChild(svgEl("text", {class: "strip-label", x: 12, y: top + 17}, "request"));
  const g = svgEl("g", {"clip-path": "url(#tl-clip)"});
  strip.appendChild(g);
  const closing = m.statusMarks.filter((s) => s.status !== "open");
  const last = closing.length ? closing[closing.length - 1] : null;
  const status = m.request.status || "";
  const end = status === "open" || !last ? m.tEnd : last.t;
  const bar = svgEl("rect", {class: "request-bar", "data-status": status, x: x(m.tMin), y: top + 8,
    width: Math.max(x(end) - x(m.tMin), 2), height: 10, rx: 5});
  bar.appendChild(svgEl("title", {}, "request " + (m.request.request_id ?? "") + ": " + status +
    " (" + duration(end - m.tMin) + " from its first event)"));
  g.appendChild(bar);
  for (const s of m.statusMarks) {
    const px = x(s.t);
    const d = detailOf(s.ev);
    const flag = svgEl("path", {class: "mark-status", "data-status": s.status, "data-event-seq": s.ev.seq,
      d: "M" + px + "," + (top + 22) + " v-18 l9,4 l-9,4"});
    flag.appendChild(svgEl("title", {}, "request " + s.status + " at " + isoTime(s.t) +
      (d.client_error ? "\nclient error " + (typeof d.client_error === "string" ? d.client_error : compactJson(d.client_error)) : "")));
    g.appendChild(flag);
  }
  return strip;
}

function firstDelta(fd, x, height) {
  const g = svgEl("g", {class: "first-delta"});
  const px = x(fd.t);
  const tokens = fd.tokens ?? 0;
  const line = svgEl("line", {class: "mark-first-delta", "data-attempt-id": fd.aid, "data-tokens": tokens,
    "data-event-seq": fd.ev.seq, x1: px, x2: px, y1: AXIS_H, y2: height - 4});
  line.appendChild(svgEl("title", {}, "first delta at " + isoTime(fd.t) + " by attempt " + fd.aid +
    ", " + tokens + " delivered output tokens: the point of no retry"));
  g.appendChild(line);
  const label = "point of no retry · " + tokens + " tok";
  const right = px + 6 + label.length * CHAR_W < x.x1;
  g.appendChild(svgEl("text", {class: "first-delta-label", x: right ? px + 6 : px - 6, y: AXIS_H + 12,
    "text-anchor": right ? "start" : "end"}, label));
  return g;
}

function nowLine(m, x, height) {
  const px = x(m.tEnd);
  const line = svgEl("line", {class: "now-line", x1: px, x2: px, y1: AXIS_H - 4, y2: height - 4});
  line.appendChild(svgEl("title", {}, "now: " + isoTime(m.tEnd)));
  return line;
}

// A retry_prefill decision's arrow from the failed attempt to the one it created.
function links(m, lanes, x) {
  const g = svgEl("g", {class: "failover-links"});
  const laneY = new Map(lanes.map((l) => [l.lane.id, l.top + 4 + MARK_ROW / 2]));
  for (const link of m.links) {
    const target = m.laneById.get(link.to);
    if (!laneY.has(link.from) || !target || !target.lease) continue;
    const x0 = x(link.t), y0 = laneY.get(link.from) + 7;
    const x1 = Math.max(x(target.lease.start), x0 + 1), y1 = laneY.get(link.to);
    const mid = (y0 + y1) / 2;
    g.appendChild(svgEl("path", {class: "failover-link", "marker-end": "url(#tl-arrow)",
      d: "M" + x0 + "," + y0 + " C" + x0 + "," + mid + " " + x1 + "," + mid + " " + x1 + "," + (y1 - 2)}));
  }
  return g;
}

function defs(x, height) {
  const d = svgEl("defs", {});
  const clip = svgEl("clipPath", {id: "tl-clip"});
  clip.appendChild(svgEl("rect", {x: x.x0 - 8, y: 0, width: x.x1 - x.x0 + 16, height}));
  d.appendChild(clip);
  for (const [id, cls] of [["tl-hatch-fenced", "hatch-fenced"], ["tl-hatch-lapsed", "hatch-lapsed"]]) {
    const p = svgEl("pattern", {id, width: 6, height: 6, patternUnits: "userSpaceOnUse",
      patternTransform: "rotate(45)"});
    p.appendChild(svgEl("rect", {class: cls + "-bg", width: 6, height: 6}));
    p.appendChild(svgEl("line", {class: cls, x1: 0, y1: 0, x2: 0, y2: 6}));
    d.appendChild(p);
  }
  const marker = svgEl("marker", {id: "tl-arrow", viewBox: "0 0 8 8", refX: 7, refY: 4, markerWidth: 7,
    markerHeight: 7, orient: "auto-start-reverse"});
  marker.appendChild(svgEl("path", {class: "arrow-head", d: "M0,0 L8,4 L0,8 z"}));
  d.appendChild(marker);
  return d;
}

function offset(ms) {
  return (ms < 0 ? "−" : "+") + duration(Math.abs(ms));
}

// The gateway that ran attempt @a (API 1.1), or "" when none did.
function gatewayOf(a) {
  return a && typeof a.gateway === "string" ? a.gateway : "";
}

function detailOf(ev) {
  return ev && ev.detail && typeof ev.detail === "object" ? ev.detail : {};
}

function idLines(id) {
  const lines = [];
  for (let i = 0; i < id.length; i += ID_CHARS) lines.push(id.slice(i, i + ID_CHARS));
  return lines.length ? lines : [""];
}

function clip(s, n) {
  s = String(s);
  if (n <= 1) return "";
  return s.length <= n ? s : s.slice(0, Math.max(n - 1, 1)) + "…";
}
