#!/usr/bin/env python3
"""The chaos campaign's judge: only what the outside world saw.

Three records, never the database:
  - the tool service's log (tools.jsonl): every call the tool received,
    with its key, fencing token and verdict (executed, refused, transient,
    deduped), in the order the tool saw them;
  - the clients' logs (clients/*.jsonl): every HTTP exchange each agent,
    router and the operator had with ledgerd, as sent and as answered (or
    how no answer came), and the C SDK agent's outcomes;
  - the final state through the HTTP API once the campaign quiesced
    (final.json, made by `collect`): `GET /v1/requests/{rid}` with every
    page of its events, `GET` of each of its tool calls, and for every key
    whose completion a client saw acknowledged, two fresh claims (new
    claim_ids, one through each ledgerd) that must replay it.

`judge(run)` returns the anomalies, each `{"kind", "text", ...ids}`:

  double_execution        a key executed twice by the tool, unless between
                          the two the ledger issued a token by a dedupe-safe
                          reclaim of an unknown outcome or after a resolve
                          as not_executed
  tool_token_order        executions of a key not in strictly increasing
                          token order, as the tool saw them
  history_token_order     tokens of a key not strictly increasing in its history
  superseded_execution    the tool executed a key under token t after the
                          history had issued t' > t to another holder,
                          which executed too (excused as double_execution)
  token_never_issued      the tool executed under a token the history never issued
  lost_claim              a client was told "claimed" with a token the
                          history does not have
  lost_completion         a client was told "completed" and the final
                          state, or a fresh claim, does not give back that
                          outcome and result byte for byte
  conflicting_acks        two clients were told different results for one key
  claim_while_held        a key handed to a new holder (unknown -> claimed)
                          while the old holder's lease, as its own
                          acknowledged claim or renewal proves, still ran
  two_live_attempts       an attempt created while another was live, or
                          while a revoked one still blocked (lease running,
                          no ack); or a live one superseded for uncertain
                          liveness while its acknowledged lease still ran
  attempt_after_first_delta  an attempt created after a first delta was
                          recorded, or after a router was told its deliver went through
  lost_attempt, lost_delta, lost_request  an acknowledged attempt, first
                          delta or request missing from the final state
  lost_close              a router was told its request completed (finish)
                          or ended (reject, terminate_stream), and it did not
  bad_transition          an event that is not an edge of the state machines
                          (TOOL_CALL_EDGES, ATTEMPT_EDGES, REQUEST_EDGES, below),
                          or that breaks the edge's token rule
  no_rights               a claim, deliver or finish by an attempt that is
                          not live, or of a request that is not open; a
                          claim without attempt in a request with attempts
  final_state_mismatch    the final state is not where the history's walk ends
  foreign_result          a succeeded call's result is no answer the tool
                          ever gave for its key

    checker.py RUN_FOLDER     judges a run folder again; exit 1 on anomalies
"""

from __future__ import annotations

import json
import sys
import urllib.parse
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

# The ledger writes times with milliseconds; a client's clock is the same host's.
SLACK_S = 0.005
# Final failover decisions and the request status they leave for good.
CLOSING_ACTIONS = {"reject": "failed", "terminate_stream": "terminated"}
UNCERTAIN_CAUSES = ("heartbeat_timeout", "network_error", "next_attempt", "overloaded",
                    "client_disconnected")

# --- the state machines of docs/design.md, as tables ------------------------------

# Tool call: (state, event) -> state. "unknown" is derived from the clock and
# never written, so the walk stays in in_progress when a lease runs out; the
# edges that leave "unknown" are those of in_progress. The event is the
# type, qualified: claimed:new (no previous_state), claimed:released,
# claimed:unknown, completed:<outcome>, released, late_completion:<outcome>,
# resolved:<resolution>.
ABSENT = "absent"
TOOL_CALL_EDGES = {
    (ABSENT, "claimed:new"): "in_progress",                     # [1]
    ("in_progress", "completed:succeeded"): "succeeded",        # [3]
    ("in_progress", "completed:failed"): "failed",              # [3]
    ("in_progress", "released"): "released",                    # [4]
    ("released", "claimed:released"): "in_progress",            # [6]
    ("in_progress", "claimed:unknown"): "in_progress",          # [5] then [7]
    ("in_progress", "late_completion:succeeded"): "succeeded",  # [8]
    ("in_progress", "late_completion:failed"): "failed",
    ("released", "late_completion:succeeded"): "succeeded",
    ("released", "late_completion:failed"): "failed",
    ("in_progress", "resolved:succeeded"): "succeeded",         # [9]
    ("in_progress", "resolved:failed"): "failed",
    ("in_progress", "resolved:not_executed"): "released",
    ("released", "resolved:succeeded"): "succeeded",
    ("released", "resolved:failed"): "failed",
    ("released", "resolved:not_executed"): "released",
}
# How each edge moves the fencing token: "first" (it is 1), "next" (the
# event's token is the current one plus one), "same" (the event names the
# current token), "older" (the event names the current token or an older one).
TOOL_CALL_TOKEN_RULE = {
    "claimed:new": "first", "claimed:released": "next", "claimed:unknown": "next",
    "completed:succeeded": "same", "completed:failed": "same", "released": "same",
    "late_completion:succeeded": "older", "late_completion:failed": "older",
    "resolved:succeeded": "next", "resolved:failed": "next", "resolved:not_executed": "next",
}
TOOL_CALL_FINAL = ("succeeded", "failed")

# Attempt: "expired" is derived (a live attempt past its lease), so it walks as live.
ATTEMPT_EDGES = {
    (ABSENT, "attempt_created"): "live",                                  # A1
    ("live", "attempt_revoked:cancel_requested"): "cancel_requested",     # A4
    ("live", "attempt_cancel_requested"): "cancel_requested",             # A4
    ("live", "attempt_revoked:dead"): "dead",                             # A7
    ("cancel_requested", "attempt_revoked:dead"): "dead",                 # A7
    ("live", "attempt_revoked:superseded"): "superseded",                 # A8
    ("cancel_requested", "attempt_revoked:superseded"): "superseded",     # A8
    ("live", "attempt_cancelled"): "cancelled",                           # A5
    ("cancel_requested", "attempt_cancelled"): "cancelled",               # A5
    ("live", "attempt_finished:completed"): "finished",                   # A6
    ("live", "attempt_finished:failed"): "failed",                        # A6
}

# Request: created open by its first claim or attempt.
REQUEST_EDGES = {
    ("open", "completed"): "completed",    # Q3
    ("open", "failed"): "failed",          # Q4
    ("open", "terminated"): "terminated",  # Q5
    ("open", "abandoned"): "abandoned",    # Q6
    ("abandoned", "open"): "open",         # Q7
}


def ts(text):
    """An RFC 3339 timestamp of the API as seconds since the epoch."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def raw_member(text, name):
    """The JSON text of the top-level member @name of the object in @text, as written."""
    decoder = json.JSONDecoder()
    ws = json.decoder.WHITESPACE.match

    def expect(i, char):
        i = ws(text, i).end()
        if text[i:i + 1] != char:
            raise ValueError("expected %r at %d" % (char, i))
        return i + 1

    i = expect(0, "{")
    if text[ws(text, i).end():ws(text, i).end() + 1] == "}":
        return None
    while True:
        i = expect(i, '"')
        key, i = json.decoder.scanstring(text, i)
        start = ws(text, expect(i, ":")).end()
        _, end = decoder.raw_decode(text, start)
        if key == name:
            return text[start:end]
        i = ws(text, end).end()
        if text[i:i + 1] == "}":
            return None
        i = expect(i, ",")


def parse_path(path):
    """(op, rid, sub_id) of an API path; op like "claim", "attempt_renew", "failover"."""
    parts = [urllib.parse.unquote(p) for p in path.split("?")[0].strip("/").split("/")]
    if parts[:2] != ["v1", "requests"] or len(parts) < 3:
        return ("list" if parts[:2] == ["v1", "tool-calls"] else "other", None, None)
    rid = parts[2]
    rest = parts[3:]
    if not rest:
        return "get_request", rid, None
    if rest[0] == "tool-calls" and len(rest) == 3:
        return rest[2], rid, rest[1]
    if rest[0] == "tool-calls" and len(rest) == 2:
        return "get_tool_call", rid, rest[1]
    if rest == ["attempts"]:
        return "attempt_begin", rid, None
    if rest[0] == "attempts" and len(rest) == 3:
        return "attempt_" + rest[2].replace("-", "_"), rid, rest[1]
    if rest == ["failover"]:
        return "failover", rid, None
    return "other", rid, None


def _json(text):
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


# --- what the clients were told -------------------------------------------------


class Told:
    """Every acknowledgement the clients' logs hold, sorted by kind."""

    def __init__(self, client_entries):
        self.completions = defaultdict(list)  # key -> [{"outcome", "result", "proc", "t", "op"}]
        self.claims = defaultdict(list)       # key -> [{"token", "t0", "status", "lease_ms"}]
        self.call_renewals = defaultdict(list)  # (key, token) -> [t0 + lease_s]
        self.attempts = defaultdict(set)      # rid -> {attempt_id}
        self.attempt_leases = defaultdict(list)  # (rid, aid) -> [t0 + lease_s]
        self.delivers = defaultdict(list)     # rid -> [(aid, t1)]
        self.closed = defaultdict(set)        # rid -> {status a router was told it ends in}
        self.rids = set()
        for e in client_entries:
            if e.get("kind") == "http":
                self._http(e)
            elif e.get("kind") == "outcome" and e.get("sdk") == "c":
                self._c_outcome(e)
            if e.get("rid"):
                self.rids.add(e["rid"])

    def _http(self, e):
        op, rid, sub = parse_path(e["path"])
        if rid:
            self.rids.add(rid)
        status = e.get("status")
        if status is None or status >= 300:
            return
        text = e.get("answer") or ""
        body = _json(text)
        if not isinstance(body, dict):
            return
        sent = _json(e.get("body")) or {}
        if op in ("claim", "complete", "resolve", "renew", "release"):
            key = "%s:%s" % (rid, sub)
            if body.get("status") == "completed":
                self.completions[key].append({
                    "outcome": body.get("outcome"), "result": raw_member(text, "result"),
                    "proc": e.get("proc"), "t": e.get("t1"), "op": op})
            elif op == "claim" and body.get("status") == "claimed":
                self.claims[key].append({"token": body.get("fencing_token"), "t0": e["t0"],
                                         "status": status, "lease_ms": body.get("lease_ms"),
                                         "proc": e.get("proc")})
            elif op == "renew" and "lease_ms" in body:
                self.call_renewals[(key, sent.get("fencing_token"))].append(
                    e["t0"] + body["lease_ms"] / 1000)
        elif op == "attempt_begin":
            aid = body.get("attempt_id")
            self.attempts[rid].add(aid)
            if status == 201:
                self.attempt_leases[(rid, aid)].append(e["t0"] + body["lease_ms"] / 1000)
        elif op == "failover":
            attempt = body.get("attempt")
            if body.get("action") == "retry_prefill" and isinstance(attempt, dict):
                self.attempts[rid].add(attempt.get("attempt_id"))
            if body.get("action") in CLOSING_ACTIONS:
                self.closed[rid].add(CLOSING_ACTIONS[body["action"]])
        elif op == "attempt_finish":
            status = (body.get("request") or {}).get("status")
            if status == "completed":
                self.closed[rid].add(status)
        elif op == "attempt_renew" and "lease_ms" in body:
            self.attempt_leases[(rid, sub)].append(e["t0"] + body["lease_ms"] / 1000)
        elif op == "attempt_deliver":
            self.delivers[rid].append((sub, e["t1"]))

    def _c_outcome(self, e):
        key = "%s:%s" % (e["rid"], e["cid"])
        kind = e.get("call_kind")
        if kind in ("executed", "executed_failed", "replayed") and \
                e.get("result_json") is not None and e.get("call") in TOOL_CALL_FINAL:
            self.completions[key].append({"outcome": e["call"], "result": e["result_json"],
                                          "proc": e.get("proc"), "t": e.get("t"),
                                          "op": "c_sdk_" + kind})
        if kind in ("executed", "executed_failed") and e.get("token"):
            self.claims[key].append({"token": e["token"], "t0": None, "status": None,
                                     "lease_ms": None, "proc": e.get("proc")})


def acknowledged_keys(client_entries):
    """The keys some client was told were completed: those collect() claims again."""
    return sorted(Told(client_entries).completions)


# --- walking one request's history -------------------------------------------------


class Walk:
    """One request's history walked through the three machines; anomalies on the way."""

    def __init__(self, rid, view, told, anomalies):
        self.rid = rid
        self.told = told
        self.out = anomalies
        self.request = "open"
        self.first_delta = None  # the first_delta event
        self.attempts = {}       # aid -> state
        self.attempt_created = {}  # aid -> (at, lease_ms, epoch)
        self.calls = {}          # cid -> {"state", "token", "dedupes", "issued": [(token, at, how)]}
        self.epochs = 0
        for event in view.get("events", []):
            self.step(event)
        self.final(view)

    def bad(self, kind, text, **ids):
        self.out.append(dict({"kind": kind, "rid": self.rid, "text": text}, **ids))

    def attempt_lease_end(self, aid):
        """The latest end of @aid's lease some record proves (creation, acknowledged renewals)."""
        ends = list(self.told.attempt_leases.get((self.rid, aid), []))
        if aid in self.attempt_created:
            at, lease_ms, _ = self.attempt_created[aid]
            if lease_ms:
                ends.append(at + lease_ms / 1000)
        return max(ends) if ends else None

    def step(self, ev):
        kind = ev["type"]
        d = ev.get("detail") or {}
        at = ts(ev["at"])
        if ev.get("tool_call_id") and kind != "refused":
            self.call_event(ev, kind, d, at)
        elif kind.startswith("attempt_"):
            self.attempt_event(ev, kind, d, at)
        elif kind == "request_status":
            label = d.get("status")
            after = REQUEST_EDGES.get((self.request, label))
            if after is None:
                self.bad("bad_transition", "request %s -> %s (seq %s) is no edge"
                         % (self.request, label, ev["seq"]), seq=ev["seq"])
            else:
                self.request = after
        elif kind == "first_delta":
            aid = ev.get("attempt_id")
            if self.first_delta is None:
                self.first_delta = ev
            if self.attempts.get(aid) != "live" or self.request != "open":
                self.bad("no_rights", "first delta by attempt %s (%s) of a %s request (seq %s)"
                         % (aid, self.attempts.get(aid), self.request, ev["seq"]),
                         seq=ev["seq"])

    # --- attempts ---

    def attempt_event(self, ev, kind, d, at):
        aid = ev.get("attempt_id")
        label = kind
        if kind == "attempt_revoked":
            label = "attempt_revoked:%s" % d.get("state")
        elif kind == "attempt_finished":
            label = "attempt_finished:%s" % d.get("outcome")
        before = self.attempts.get(aid, ABSENT)
        after = ATTEMPT_EDGES.get((before, label))
        if after is None:
            self.bad("bad_transition", "attempt %s: %s -> %s (seq %s) is no edge"
                     % (aid, before, label, ev["seq"]), attempt_id=aid, seq=ev["seq"])
            return
        if kind == "attempt_created":
            self.created(ev, aid, d, at)
        elif label == "attempt_revoked:superseded" and d.get("cause") in UNCERTAIN_CAUSES:
            end = self.attempt_lease_end(aid)
            if end is not None and at < end - SLACK_S:
                self.bad("two_live_attempts",
                         "attempt %s superseded (%s) at %.3f while its acknowledged lease ran "
                         "to %.3f" % (aid, d.get("cause"), at, end), attempt_id=aid)
        elif kind == "attempt_finished":
            if before != "live" or self.request != "open":
                self.bad("no_rights", "attempt %s finished as %s while %s, request %s"
                         % (aid, d.get("outcome"), before, self.request), attempt_id=aid)
        self.attempts[aid] = after

    def created(self, ev, aid, d, at):
        self.epochs += 1
        if d.get("epoch") != self.epochs:
            self.bad("bad_transition", "attempt %s created with epoch %s, expected %d"
                     % (aid, d.get("epoch"), self.epochs), attempt_id=aid)
        if self.first_delta is not None:
            self.bad("attempt_after_first_delta", "attempt %s created (seq %s) after the first "
                     "delta (seq %s)" % (aid, ev["seq"], self.first_delta["seq"]),
                     attempt_id=aid)
        for other_aid, t1 in self.told.delivers.get(self.rid, []):
            if at > t1 + SLACK_S:
                self.bad("attempt_after_first_delta",
                         "attempt %s created at %.3f, after a router was told at %.3f that "
                         "%s delivered" % (aid, at, t1, other_aid), attempt_id=aid)
                break
        if self.request != "open" and not (self.request == "abandoned" and d.get("reopened")):
            self.bad("no_rights", "attempt %s created in a %s request" % (aid, self.request),
                     attempt_id=aid)
        for other, state in self.attempts.items():
            if state == "live":
                self.bad("two_live_attempts", "attempt %s created (seq %s) while %s was live"
                         % (aid, ev["seq"], other), attempt_id=aid)
            elif state == "cancel_requested":
                end = self.attempt_lease_end(other)
                if end is not None and at < end - SLACK_S:
                    self.bad("two_live_attempts",
                             "attempt %s created at %.3f while %s, cancel requested and not "
                             "acknowledged, still blocked (lease to %.3f)"
                             % (aid, at, other, end), attempt_id=aid)
        self.attempt_created[aid] = (at, d.get("lease_ms"), d.get("epoch"))

    # --- tool calls ---

    def call_event(self, ev, kind, d, at):
        cid = ev["tool_call_id"]
        call = self.calls.setdefault(cid, {"state": ABSENT, "token": 0, "dedupes": None,
                                           "issued": [], "lease_end": None})
        if kind in ("resolve_contradicted", "duplicate_execution"):
            # Not a move: the history's note that a holder revoked by a
            # not_executed resolution reported it did run. It must name that
            # resolution, and an older token than it gave the key.
            resolved = [t for t, _, how in call["issued"] if how == "not_executed"]
            token = d.get("fencing_token")
            if (d.get("resolved_token") not in resolved or not isinstance(token, int)
                    or token >= d["resolved_token"]):
                self.bad("bad_transition", "tool call %s: %s (seq %s) names no not_executed "
                         "resolution that revoked token %s" % (cid, kind, ev["seq"], token),
                         key=self.key(cid), seq=ev["seq"])
            return
        if kind == "claimed":
            label = "claimed:%s" % d.get("previous_state", "new")
        elif kind in ("completed", "late_completion"):
            label = "%s:%s" % (kind, d.get("outcome"))
        elif kind == "resolved":
            label = "resolved:%s" % d.get("resolution")
        else:
            label = kind
        before = call["state"]
        after = TOOL_CALL_EDGES.get((before, label))
        if after is None:
            self.bad("bad_transition", "tool call %s: %s -> %s (seq %s) is no edge"
                     % (cid, before, label, ev["seq"]), key=self.key(cid), seq=ev["seq"])
            return
        token = d.get("fencing_token")
        rule = TOOL_CALL_TOKEN_RULE[label]
        ok = {"first": token == 1, "next": token == call["token"] + 1,
              "same": token == call["token"],
              "older": isinstance(token, int) and token <= call["token"]}[rule]
        if not ok:
            self.bad("history_token_order" if rule in ("first", "next") else "bad_transition",
                     "tool call %s: %s with token %s when the current token is %s (seq %s)"
                     % (cid, label, token, call["token"], ev["seq"]), key=self.key(cid))
        if kind == "claimed":
            self.claimed(ev, cid, call, label, d, at)
        if rule in ("first", "next") and isinstance(token, int):
            how = {"claimed:unknown": "dedupe_reclaim",
                   "resolved:not_executed": "not_executed"}.get(label, label)
            call["issued"].append((token, at, how))
            call["token"] = max(call["token"], token)
        call["state"] = after

    def claimed(self, ev, cid, call, label, d, at):
        aid = ev.get("attempt_id")
        if label == "claimed:new":
            call["dedupes"] = bool(d.get("tool_dedupes"))
        if label == "claimed:unknown":
            if not call["dedupes"]:
                self.bad("bad_transition", "tool call %s reclaimed from unknown (seq %s) though "
                         "its first claim did not declare tool_dedupes" % (cid, ev["seq"]),
                         key=self.key(cid))
            end = self.call_lease_end(cid, call)
            if end is not None and at < end - SLACK_S:
                self.bad("claim_while_held",
                         "tool call %s handed to a new holder (token %s) at %.3f while the "
                         "holder of token %s had a lease to %.3f"
                         % (cid, d.get("fencing_token"), at, call["token"], end),
                         key=self.key(cid))
        if self.epochs and not aid:
            self.bad("no_rights", "tool call %s claimed without an attempt in a request with "
                     "attempts (seq %s)" % (cid, ev["seq"]), key=self.key(cid))
        if aid and (self.attempts.get(aid) != "live" or self.request != "open"):
            self.bad("no_rights", "tool call %s claimed by attempt %s (%s) of a %s request "
                     "(seq %s)" % (cid, aid, self.attempts.get(aid, "unknown"), self.request,
                                   ev["seq"]), key=self.key(cid))
        call["lease_end"] = at + (d.get("lease_ms") or 0) / 1000

    def call_lease_end(self, cid, call):
        ends = [e for e in self.told.call_renewals.get((self.key(cid), call["token"]), [])]
        if call["lease_end"] is not None:
            ends.append(call["lease_end"])
        return max(ends) if ends else None

    def key(self, cid):
        return "%s:%s" % (self.rid, cid)

    # --- the end of the walk against the final state ---

    def final(self, view):
        request = view.get("request") or {}
        if request.get("status") != self.request:
            self.bad("final_state_mismatch", "the request is %s, its history ends %s"
                     % (request.get("status"), self.request))
        if self.first_delta is not None and not request.get("first_delta_sent"):
            self.bad("final_state_mismatch", "a first delta in the history, first_delta_sent "
                     "false")
        for a in view.get("attempts", []):
            walked = self.attempts.get(a["attempt_id"], ABSENT)
            if a["state"] != walked and not (walked == "live" and a["state"] == "expired"):
                self.bad("final_state_mismatch", "attempt %s is %s, its history ends %s"
                         % (a["attempt_id"], a["state"], walked), attempt_id=a["attempt_id"])
        for aid in self.told.attempts.get(self.rid, ()):
            if aid not in {a["attempt_id"] for a in view.get("attempts", [])}:
                self.bad("lost_attempt", "a router was told attempt %s exists; the final state "
                         "has no such attempt" % aid, attempt_id=aid)
        if self.told.delivers.get(self.rid) and not request.get("first_delta_sent"):
            self.bad("lost_delta", "a router was told its deliver went through; "
                     "first_delta_sent is false")
        for status in sorted(self.told.closed.get(self.rid, ())):
            if request.get("status") != status:
                self.bad("lost_close", "a router was told the request ends %s (a finish or "
                         "a final failover decision); it is %s" % (status, request.get("status")))


def walk_calls_final(walk, tool_calls, anomalies):
    for cid, call in walk.calls.items():
        key = walk.key(cid)
        got = tool_calls.get(key)
        if got is None:
            anomalies.append({"kind": "final_state_mismatch", "key": key,
                              "text": "no GET of tool call %s" % key})
            continue
        state = got.get("state")
        walked = call["state"]
        if state != walked and not (walked == "in_progress" and state == "unknown"):
            anomalies.append({"kind": "final_state_mismatch", "key": key,
                              "text": "tool call %s is %s, its history ends %s"
                              % (key, state, walked)})
        if got.get("fencing_token") != call["token"]:
            anomalies.append({"kind": "final_state_mismatch", "key": key,
                              "text": "tool call %s has token %s, its history issued up to %s"
                              % (key, got.get("fencing_token"), call["token"])})


# --- the tool's record against the history ---------------------------------------------


def check_tool_log(tool_log, walks, told, anomalies):
    by_key = defaultdict(list)
    for e in tool_log:
        by_key[e["key"]].append(e)
    issued_by_key = {}
    for walk in walks.values():
        for cid, call in walk.calls.items():
            issued_by_key[walk.key(cid)] = call["issued"]
    for key, entries in sorted(by_key.items()):
        executions = [e for e in entries if e["verdict"] == "executed"]
        issued = issued_by_key.get(key, [])
        issued_tokens = {t for t, _, _ in issued}
        excusing = [t for t, _, how in issued if how in ("dedupe_reclaim", "not_executed")]
        for e in executions:
            if e["token"] not in issued_tokens:
                anomalies.append({"kind": "token_never_issued", "key": key,
                                  "text": "the tool executed %s under token %s; the history "
                                  "issued %s" % (key, e["token"], sorted(issued_tokens))})
        for a, b in zip(executions, executions[1:]):
            if b["token"] <= a["token"]:
                anomalies.append({"kind": "tool_token_order", "key": key,
                                  "text": "the tool executed %s under token %s (seq %s) after "
                                  "token %s (seq %s)" % (key, b["token"], b["seq"], a["token"],
                                                          a["seq"])})
            if not any(a["token"] < t <= b["token"] for t in excusing):
                anomalies.append({"kind": "double_execution", "key": key,
                                  "text": "the tool executed %s twice: token %s (seq %s) and "
                                  "token %s (seq %s), with no dedupe-safe reclaim or "
                                  "not_executed resolution between"
                                  % (key, a["token"], a["seq"], b["token"], b["seq"])})
        executed_tokens = {e["token"] for e in executions}
        for e in executions:
            for t, at, how in issued:
                if t > e["token"] and at < e["at"] - SLACK_S and t in executed_tokens and \
                        not any(e["token"] < x <= t for x in excusing):
                    anomalies.append({"kind": "superseded_execution", "key": key,
                                      "text": "the tool executed %s under token %s at %.3f, "
                                      "after the ledger issued token %s at %.3f (%s), which "
                                      "executed too" % (key, e["token"], e["at"], t, at, how)})
                    break
    # What a client was told it holds must be in the history.
    for key, claims in told.claims.items():
        issued_tokens = {t for t, _, _ in issued_by_key.get(key, [])}
        for c in claims:
            if c["token"] not in issued_tokens:
                anomalies.append({"kind": "lost_claim", "key": key,
                                  "text": "%s was told it holds %s with token %s; the history "
                                  "issued %s" % (c["proc"], key, c["token"],
                                                  sorted(issued_tokens))})
    return by_key


def check_completions(told, tool_calls, replays, anomalies):
    for key, acks in sorted(told.completions.items()):
        results = {a["result"] for a in acks}
        if len(results) > 1:
            anomalies.append({"kind": "conflicting_acks", "key": key,
                              "text": "clients were told %d different results for %s: %s"
                              % (len(results), key, sorted(results)[:3])})
        got = tool_calls.get(key) or {}
        for ack in acks:
            if got.get("state") != ack["outcome"]:
                anomalies.append({"kind": "lost_completion", "key": key,
                                  "text": "%s was told %s %s (%s); the final state is %s"
                                  % (ack["proc"], key, ack["outcome"], ack["op"],
                                     got.get("state"))})
                break
        ack = acks[0]
        for r in replays.get(key, []):
            text = r.get("text") or ""
            body = _json(text) or {}
            result = raw_member(text, "result") if body.get("status") == "completed" else None
            if r.get("status") != 200 or body.get("status") != "completed" or \
                    body.get("outcome") != ack["outcome"] or result != ack["result"]:
                anomalies.append({"kind": "lost_completion", "key": key,
                                  "text": "%s was told %s %s with result %s; a fresh claim "
                                  "through %s got %s %s" % (ack["proc"], key, ack["outcome"],
                                                             ack["result"], r.get("via"),
                                                             r.get("status"), text[:300])})
        if not replays.get(key):
            anomalies.append({"kind": "lost_completion", "key": key,
                              "text": "%s was told %s completed; no fresh claim replayed it"
                              % (ack["proc"], key)})


def check_results(tool_by_key, tool_calls, anomalies):
    for key, call in sorted(tool_calls.items()):
        if call.get("state") != "succeeded" or "result" not in call:
            continue
        answers = [e["answer"] for e in tool_by_key.get(key, [])
                   if e["verdict"] in ("executed", "deduped")]
        if call["result"] not in answers:
            anomalies.append({"kind": "foreign_result", "key": key,
                              "text": "%s succeeded with %s, which the tool never answered "
                              "for it" % (key, json.dumps(call["result"])[:200])})


def judge(run):
    """The anomalies of a run: @run has "tool_log", "clients" (every client entry) and "final"."""
    anomalies = []
    final = run["final"]
    told = Told(run["clients"])
    walks = {}
    for rid, view in sorted(final.get("requests", {}).items()):
        walks[rid] = Walk(rid, view, told, anomalies)
        walk_calls_final(walks[rid], final.get("tool_calls", {}), anomalies)
    acked_rids = set(told.attempts) | {k.rsplit(":", 1)[0] for k in told.completions} | \
        {k.rsplit(":", 1)[0] for k in told.claims}
    for rid in sorted(acked_rids - set(final.get("requests", {}))):
        anomalies.append({"kind": "lost_request", "rid": rid,
                          "text": "clients were told of attempts, claims or completions of %s; "
                          "the API has no such request" % rid})
    tool_by_key = check_tool_log(run["tool_log"], walks, told, anomalies)
    check_completions(told, final.get("tool_calls", {}), final.get("replays", {}), anomalies)
    check_results(tool_by_key, final.get("tool_calls", {}), anomalies)
    return anomalies


# --- reading a run, collecting the final state ------------------------------------------


def read_json_lines(path):
    entries = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return entries
    for line in text.splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue  # a torn last line
    return entries


def read_clients(folder):
    entries = []
    for path in sorted(Path(folder, "clients").glob("*.jsonl")):
        entries += read_json_lines(path)
    return entries


def load_run(folder):
    folder = Path(folder)
    return {"tool_log": read_json_lines(folder / "tools.jsonl"),
            "clients": read_clients(folder),
            "final": json.loads((folder / "final.json").read_text())}


def collect(folder, api_urls, token, timeout_s=10):
    """Reads the final state through the API (@api_urls: each ledgerd) into final.json."""
    import http.client
    import secrets

    def call(url, method, path, body=None):
        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body),
                         headers={"Authorization": "Bearer " + token,
                                  "Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read().decode("utf-8", "replace")
        finally:
            conn.close()

    folder = Path(folder)
    clients = read_clients(folder)
    tool_log = read_json_lines(folder / "tools.jsonl")
    rids = set(Told(clients).rids) | {e["key"].rsplit(":", 1)[0] for e in tool_log}
    cursor = None
    while True:  # and every request the API knows, whoever made it
        status, text = call(api_urls[0], "GET", "/v1/requests?limit=1000" + (
            "&cursor=" + urllib.parse.quote(cursor) if cursor else ""))
        if status != 200:
            break
        page = json.loads(text)
        rids |= {r["request_id"] for r in page.get("items", [])}
        cursor = page.get("next_cursor")
        if not cursor:
            break
    final = {"requests": {}, "tool_calls": {}, "replays": {}, "errors": []}
    for rid in sorted(rids):
        path = "/v1/requests/" + urllib.parse.quote(rid, safe="")
        status, text = call(api_urls[0], "GET", path)
        if status != 200:
            final["errors"].append({"rid": rid, "status": status, "text": text[:300]})
            continue
        view = json.loads(text)
        while view.get("next_events_cursor"):
            status, text = call(api_urls[0], "GET", path + "?events_cursor=" +
                                urllib.parse.quote(view["next_events_cursor"]))
            page = json.loads(text)
            view["events"] += page["events"]
            view["next_events_cursor"] = page.get("next_events_cursor")
        final["requests"][rid] = view
        for tc in view.get("tool_calls", []):
            key = tc["idempotency_key"]
            status, text = call(api_urls[0], "GET", path + "/tool-calls/" +
                                urllib.parse.quote(tc["tool_call_id"], safe=""))
            final["tool_calls"][key] = json.loads(text) if status == 200 else {
                "error": status, "text": text[:300]}
    for key in acknowledged_keys(clients):
        rid, cid = key.rsplit(":", 1)
        view = final["requests"].get(rid) or {}
        got = final["tool_calls"].get(key) or {}
        body = {"claim_id": secrets.token_hex(16), "tool_dedupes": bool(got.get("tool_dedupes"))}
        if got.get("tool"):
            body["tool"] = got["tool"]
        if got.get("args_sha256"):
            body["args_sha256"] = got["args_sha256"]
        if view.get("attempts"):
            body["attempt_id"] = view["attempts"][-1]["attempt_id"]
        path = "/v1/requests/%s/tool-calls/%s/claim" % (urllib.parse.quote(rid, safe=""),
                                                         urllib.parse.quote(cid, safe=""))
        final["replays"][key] = []
        for url in api_urls:
            body["claim_id"] = secrets.token_hex(16)
            status, text = call(url, "POST", path, body)
            final["replays"][key].append({"via": url, "status": status, "text": text})
    (folder / "final.json").write_text(json.dumps(final, indent=1))
    return final


# --- figures for the report ----------------------------------------------------------


def operation_counts(client_entries):
    """Counter of (op, outcome) over every HTTP exchange: "201 claimed", "409 in_progress",
    "no answer", ..."""
    counts = Counter()
    for e in client_entries:
        if e.get("kind") == "http":
            op = parse_path(e["path"])[0]
            if e.get("status") is None:
                label = "no answer"
            else:
                body = _json(e.get("answer")) or {}
                code = (body.get("error") or {}).get("code") if isinstance(
                    body.get("error"), dict) else None
                label = "%s %s" % (e["status"], code or body.get("status") or
                                   body.get("action") or body.get("state") or "")
            counts[(op, label.strip())] += 1
        elif e.get("kind") == "outcome" and e.get("sdk") == "c":
            counts[("c_sdk_tool_call", e.get("call_kind"))] += 1
    return counts


def main():
    if len(sys.argv) != 2:
        print("usage: checker.py RUN_FOLDER", file=sys.stderr)
        return 2
    anomalies = judge(load_run(sys.argv[1]))
    for a in anomalies:
        print("%s: %s" % (a["kind"], a["text"]))
    print("%d anomalies" % len(anomalies))
    return 1 if anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
