"""The fault scenarios, each run end to end on a Stack, recorded and checked.

`run(stack, name, ...)` makes a run folder
build/faults/<name>[-k<K>-<phase>]-<time>/, writes the run's input there
(scenario, fault, seed, model revision, timings, policy), plays the
scenario against fresh replicas and a fresh gateway, and writes the trace
and the ledger's timeline beside the logs of every process. It returns the
trace and the list of violated invariants (checks.py); pytest asserts the
list is empty, the `scenario` command prints the trace and exits non-zero
if it is not.

Each scenario injects the simplest fault that proves its sentence:

- prefill_kill: die at token 0, before_compute -> rerun, the whole answer from a2.
- computed_not_sent: die at token 0, after_compute -> the same; nothing of a1 shows.
- after_first_delta: die at token 0, after_send -> the error event counting the one
  token delivered; no rerun.
- after_tool_call: the tool call before token 0, die after_tool -> the rerun replays the
  stored result: one execution.
- partition: SIGSTOP before the tool call -> a1 fenced (lease expiry) before the
  rerun; woken, its claim is refused; a2 runs the tool once.
- client_disconnect: the client leaves after 2 chunks -> upstream cancelled and
  acknowledged, no backup attempt.
- slow_replica: every token slower than the soft timeout -> keep_waiting only, the
  whole answer from a1.
- mass_failure: 12 streams, 2 of 3 replicas killed in prefill -> retries within the
  pool budget, the rest HTTP 503 retry_budget_exhausted.
- sweep: die at token k (0..8) at each phase -> a rerun exactly when nothing had
  reached the gateway, else the error event.

A fault aimed at a request's first attempt is armed on every replica
(`"attempt_id": "a1"`), so it fires wherever the gateway sends that attempt
and never on the rerun.
"""

import contextlib
import json
import signal
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import checks
from checks import Expect
from clients import openai_completion, stream_completion
from stack import GATEWAY, POLICY, Run, run_folder, wait_until
from tokens import expected_tokens

SCENARIOS = ("prefill_kill", "computed_not_sent", "after_first_delta", "partition", "after_tool_call",
             "client_disconnect", "slow_replica", "mass_failure", "sweep")
SWEEP_TOKENS = tuple(range(9))
SWEEP_PHASES = ("before_compute", "after_compute", "after_send")
# The scenarios that are a kill at a fixed point: (token, phase).
KILLS = {"prefill_kill": (0, "before_compute"), "computed_not_sent": (0, "after_compute"),
         "after_first_delta": (0, "after_send"), "after_tool_call": (0, "after_tool")}
# The scenarios the official openai client plays a second time.
OPENAI_SCENARIOS = ("prefill_kill", "after_first_delta", "after_tool_call")

DEFAULT_SEED = 7
MAX_TOKENS = 12
TOKEN_DELAY_MS = 5
DISCONNECT_AFTER_CHUNKS = 2
DISCONNECT_TOKEN_DELAY_MS = 100  # the stream is still going when the client leaves
SLOW_TOKENS = 3
MASS_STREAMS = 12
MASS_REPLICAS = 3
MASS_VICTIMS = ("gpu-1", "gpu-2")
MASS_TOKENS = 4
MASS_DEADLINE_S = 10.0  # every stream must end by then: an answer or a controlled error
SETTLE_TIMEOUT_S = 10.0


@dataclass
class Result:
    """What one run gives its caller: the trace printed, and what went wrong."""

    trace: dict
    violations: list = field(default_factory=list)
    folder: Path | None = None
    replay: str = ""


def replay_command(name, kill_at=None, phase=None, seed=DEFAULT_SEED):
    """The one command that plays the run again on a throwaway stack of its own."""
    command = "tests/faults/scenario " + name
    if name == "sweep":
        command += " --kill-at %d --phase %s" % (kill_at, phase)
    return command + " --seed %d" % seed


def validate(name, kill_at=None, phase=None):
    """Refuses a scenario that does not exist, or a sweep run without its kill point."""
    if name not in SCENARIOS:
        raise ValueError("unknown scenario %r (one of %s)" % (name, ", ".join(SCENARIOS)))
    if name == "sweep" and (kill_at not in SWEEP_TOKENS or phase not in SWEEP_PHASES):
        raise ValueError("sweep needs --kill-at in 0..%d and --phase in %s"
                         % (SWEEP_TOKENS[-1], ", ".join(SWEEP_PHASES)))
    if name != "sweep" and (kill_at is not None or phase is not None):
        raise ValueError("--kill-at and --phase choose a sweep run; %s has its own fault" % name)


def new_folder(name, kill_at=None, phase=None):
    """The run's folder: build/faults/<name>[-k<K>-<phase>]-<time>/."""
    return run_folder(name if name != "sweep" else "sweep-k%d-%s" % (kill_at, phase))


def run(stack, name, kill_at=None, phase=None, seed=DEFAULT_SEED, folder=None):
    """Runs scenario @name (for sweep: the kill at token @kill_at, @phase) on @stack.

    The run is recorded in @folder (default: a new one).
    """
    validate(name, kill_at, phase)
    folder = folder or new_folder(name, kill_at, phase)
    if name in KILLS:
        kill_at, phase = KILLS[name]
    replay = replay_command(name, kill_at, phase, seed)
    write_json(folder / "input.json", {
        "scenario": name, "kill_at": kill_at, "phase": phase, "seed": seed,
        "model_revision": checks.model_revision(), "timing": asdict(stack.timing),
        "policy": POLICY, "gateway": str(GATEWAY), "ledgerd_log": str(stack.ledgerd.log_path),
        "replay": replay})
    scenario = Scenario(stack, name, folder, seed)
    try:
        if name == "partition":
            scenario.partition()
        elif name == "client_disconnect":
            scenario.client_disconnect()
        elif name == "slow_replica":
            scenario.slow_replica()
        elif name == "mass_failure":
            scenario.mass_failure()
        else:
            scenario.kill(kill_at, phase)
    except Exception as e:
        # A run that could not be played is a failed run, with its folder and replay.
        (folder / "error.txt").write_text(traceback.format_exc())
        scenario.violations.append("harness: %s: %s (see error.txt)" % (type(e).__name__, e))
    scenario.trace.update(seed=seed, kill_at=kill_at, phase=phase, run_folder=str(folder),
                          replay=replay, violations=scenario.violations)
    write_json(folder / "trace.json", scenario.trace)
    write_json(folder / "timeline.json", scenario.timelines)
    return Result(scenario.trace, scenario.violations, folder, replay)


def write_json(path, value):
    Path(path).write_text(json.dumps(value, indent=2) + "\n")


def at_ms(timestamp):
    """Milliseconds since the epoch of an RFC 3339 timestamp of ledgerd."""
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


def configure(run_, **behaviour):
    """Sends the same /control body to every replica of the run."""
    for replica in run_.replicas:
        replica.control(**behaviour)


def events_of(run_, request_id):
    """Every replica's events for the request, in time order."""
    return sorted((e for r in run_.replicas for e in r.events(request_id)), key=lambda e: e["t"])


class Scenario:
    """One run of one scenario: plays it, and collects its trace and violations."""

    def __init__(self, stack, name, folder, seed):
        self.stack = stack
        self.name = name
        self.folder = folder
        self.seed = seed
        self.trace = {}
        self.timelines = {}
        self.violations = []

    @contextlib.contextmanager
    def running(self, folder=None, replicas=2):
        """A Run in @folder (default: the run's); a violation if its gateway died meanwhile."""
        with Run(self.stack, folder or self.folder, replicas) as run_:
            yield run_
            gateway = run_.gateway
            if gateway is not None and not gateway.alive():
                self.violations.append("gateway: exited with status %s during the run; see %s"
                                       % (gateway.proc.returncode, gateway.log_path))
                gateway = None
        # Stopped by SIGTERM: a clean exit, and no sanitizer report (make SANITIZE=...).
        if gateway is not None:
            reports = [line for line in Path(gateway.log_path).read_text(errors="replace")
                       .splitlines() if "Sanitizer" in line or "runtime error:" in line]
            if gateway.proc.returncode != 0 or reports:
                self.violations.append("gateway: exit status %s on SIGTERM, %d sanitizer "
                                       "report(s); see %s" % (gateway.proc.returncode,
                                                              len(reports), gateway.log_path))

    def settle(self, run_, stream):
        """The request's timeline once it is closed; a violation if it never closes."""
        rid = stream.request_id
        if rid is None:
            self.violations.append("client: no x-request-id (HTTP %s, %s)"
                                   % (stream.status, stream.transport_error or stream.body[:200]))
            return None
        timeline = run_.settled_timeline(rid, SETTLE_TIMEOUT_S) or run_.timeline(rid)
        if timeline is not None and timeline["request"]["status"] == "open":
            self.violations.append("ledger: request %s still open %ds after its stream ended"
                                   % (rid, SETTLE_TIMEOUT_S))
        self.timelines[rid] = timeline
        return timeline

    def check(self, run_, stream, timeline, expect, tool_executions=0):
        """The invariants every single-stream scenario must hold; sets the trace."""
        if timeline is not None:
            self.violations += checks.check_stream(stream, timeline, expect)
            self.violations += checks.check_replicas(events_of(run_, stream.request_id), timeline)
            self.violations += checks.check_tool_log(run_.tool_log(), stream.request_id,
                                                     tool_executions)
        self.trace = checks.trace(self.name, stream, timeline, run_.tool_log())

    def check_fault_fired(self, run_, request_id, kind, at, phase):
        """The fault fired where it was aimed; returns the replica it fired on."""
        for replica in run_.replicas:
            for e in replica.events(request_id):
                if e["event"] == "fault" and e["attempt_id"] == "a1":
                    if (e["kind"], e["token"], e["phase"]) != (kind, at, phase):
                        self.violations.append("harness: the fault fired as %s at token %s, %s"
                                               % (e["kind"], e["token"], e["phase"]))
                    return replica
        self.violations.append("harness: the %s fault at token %d, %s never fired"
                               % (kind, at, phase))
        return None

    @staticmethod
    def steps_after_fault(replica, request_id, until):
        """What a1 did on @replica after its fault fired and before time @until."""
        events = [e for e in replica.events(request_id) if e["attempt_id"] == "a1"]
        fired = next((i for i, e in enumerate(events) if e["event"] == "fault"), len(events))
        return [e["event"] for e in events[fired + 1:] if e["t"] < until]

    # --- the scenarios -----------------------------------------------------

    def kill(self, at, phase):
        """SIGKILL of a1's replica at token @at, @phase; the sweep and four named scenarios."""
        tool_at = 0 if phase == "after_tool" else None
        reached_gateway = at > 0 or phase == "after_send"
        expect = Expect(
            seed=self.seed, max_tokens=MAX_TOKENS,
            outcome="terminated" if reached_gateway else "complete",
            attempts=1 if reached_gateway else 2,
            attempt_id="a1" if reached_gateway else "a2",
            final_actions=("terminate_stream",) if reached_gateway else ("retry_prefill",),
            signal="upstream_closed", tool_at=tool_at)
        behaviour = {"tool_at": tool_at, "token_delay_ms": TOKEN_DELAY_MS,
                     "fault": {"kind": "die", "at": at, "phase": phase, "attempt_id": "a1"}}
        with self.running() as run_:
            configure(run_, **behaviour)
            stream = stream_completion(run_.start_gateway().url, self.seed, MAX_TOKENS)
            timeline = self.settle(run_, stream)
            victim = self.check_fault_fired(run_, stream.request_id, "die", at, phase)
            if victim is not None:
                if not wait_until(lambda: not victim.alive(), 5):
                    self.violations.append("harness: %s outlived its SIGKILL" % victim.name)
                after = self.steps_after_fault(victim, stream.request_id, float("inf"))
                if after:
                    self.violations.append("harness: %s went on after its SIGKILL: %s"
                                           % (victim.name, after))
            self.check(run_, stream, timeline, expect,
                       tool_executions=0 if tool_at is None else 1)
        if self.name in OPENAI_SCENARIOS:
            self.openai_client(behaviour, expect)

    def openai_client(self, behaviour, expect):
        """The same fault once more, consumed by the official openai npm client."""
        folder = self.folder / "openai"
        folder.mkdir()
        with self.running(folder) as run_:
            configure(run_, **behaviour)
            result = openai_completion(run_.start_gateway().url, self.seed, MAX_TOKENS)
            rid = result["request_id"]
            timeline = run_.settled_timeline(rid, SETTLE_TIMEOUT_S) if rid else None
        self.timelines["openai:%s" % rid] = timeline
        answer = "".join(expected_tokens(self.seed, MAX_TOKENS, rid, expect.tool_at))
        found = []
        if expect.outcome == "complete":
            if result["error"] is not None:
                found.append("raised %s" % result["error"])
            if result["text"] != answer:
                found.append("received %r, not the whole answer %r" % (result["text"], answer))
        else:
            code = (result["error"] or {}).get("code")
            if code != "upstream_decode_interrupted":
                found.append("raised %s, expected the code upstream_decode_interrupted"
                             % result["error"])
            if not result["text"] or not answer.startswith(result["text"]):
                found.append("received %r, not a prefix of %r" % (result["text"], answer))
        if result["attempt_ids"] != [expect.attempt_id]:
            found.append("chunks from %s, expected %s" % (result["attempt_ids"],
                                                          expect.attempt_id))
        attempts = None if timeline is None else len(timeline["attempts"])
        if attempts != expect.attempts:
            found.append("the ledger has %s attempts, expected %d" % (attempts, expect.attempts))
        self.violations += ["openai client: " + f for f in found]
        self.trace["openai_client"] = dict(result, attempts=attempts)

    def partition(self):
        """a1's replica freezes before its tool call; it is fenced, woken, refused; a2 answers.

        The zombie is woken (SIGCONT) as soon as ledgerd has fenced a1
        (the gateway's wait_for_fence) and before the rerun exists: it
        goes on to claim the tool call it was about to make, and that
        claim must be refused (an event in the timeline) although nobody
        else has made the call yet. Woken later, after a2 completed the
        call, its claim would be answered with a2's stored result, which
        starts nothing (docs/api.md, claim row 4 before row 6), and only its
        publish would be refused.
        """
        expect = Expect(seed=self.seed, max_tokens=MAX_TOKENS, outcome="complete", attempts=2,
                        attempt_id="a2", final_actions=("retry_prefill",),
                        signal="heartbeat_timeout", tool_at=0)
        with self.running() as run_:
            configure(run_, tool_at=0, token_delay_ms=TOKEN_DELAY_MS,
                      fault={"kind": "stall", "at": 0, "phase": "before_compute",
                             "attempt_id": "a1"})
            url = run_.start_gateway().url
            streams = []
            client = threading.Thread(
                target=lambda: streams.append(stream_completion(url, self.seed, MAX_TOKENS)))
            client.start()
            # The gateway holds the response (and so x-request-id) until a2 delivers: the
            # request id comes from the zombie's own log.
            stall = wait_until(lambda: next((e for r in run_.replicas for e in r.events()
                                             if e["event"] == "fault"), None), SETTLE_TIMEOUT_S)
            fenced = None
            if stall is not None:
                rid = stall["request_id"]
                zombie = next(r for r in run_.replicas if r.events(rid)
                              and r.events(rid)[-1]["event"] == "fault")
                # The replica logs its fault, then stops itself: the log can be
                # read a moment before the SIGSTOP lands.
                if not wait_until(lambda: zombie.state() == "T", 2):
                    self.violations.append("harness: %s is not stopped after its stall (%s)"
                                           % (zombie.name, zombie.state()))
                fenced = wait_until(lambda: self.fence_window(run_.timeline(rid)),
                                    SETTLE_TIMEOUT_S)
                if fenced is None:
                    self.violations.append("ledger: a1 was never fenced by wait_for_fence "
                                           "before a rerun")
                woken_at = time.time()
                zombie.signal(signal.SIGCONT)
                if not wait_until(lambda: [e for e in zombie.events(rid)
                                           if e["event"] == "claim_refused"], SETTLE_TIMEOUT_S):
                    self.violations.append("zombie: %s woke and its claim was not refused"
                                           % zombie.name)
            client.join()
            stream = streams[0]
            timeline = self.settle(run_, stream)
            self.check_fault_fired(run_, stream.request_id, "stall", 0, "before_compute")
            if timeline is not None and stall is not None:
                if not any(e["type"] == "refused" and e.get("attempt_id") == "a1"
                           and e["detail"].get("operation") == "claim"
                           for e in timeline["events"]):
                    self.violations.append("ledger: the zombie's refused claim is not in the "
                                           "timeline")
                frozen = self.steps_after_fault(zombie, rid, woken_at)
                if frozen:
                    self.violations.append("harness: %s went on while it was stopped: %s"
                                           % (zombie.name, frozen))
                acts = [e["event"] for e in zombie.events(rid) if e["event"] in (
                    "published", "tool_called", "tool_replayed")]
                if acts:
                    self.violations.append("zombie: a1 acted after it was fenced: %s" % acts)
                self.violations += self.fenced_before_rerun(timeline)
            self.check(run_, stream, timeline, expect, tool_executions=1)

    @staticmethod
    def fence_window(timeline):
        """The timeline if a1 is fenced (wait_for_fence) and a2 does not exist yet, else None."""
        if timeline is None:
            return None
        fenced = any(e["type"] == "failover_decision" and e.get("attempt_id") == "a1"
                     and e["detail"].get("action") == "wait_for_fence"
                     for e in timeline["events"])
        return timeline if fenced and len(timeline["attempts"]) == 1 else None

    @staticmethod
    def fenced_before_rerun(timeline):
        """a2 was created only after a1 was fenced: cancel-ack, or its lease ran out."""
        created = [e for e in timeline["events"]
                   if e["type"] == "attempt_created" and e.get("attempt_id") == "a2"]
        fences = [e for e in timeline["events"] if e["type"] == "failover_decision"
                  and e.get("attempt_id") == "a1"
                  and e["detail"].get("action") == "wait_for_fence"]
        if not created:
            return []
        if not fences or fences[0]["seq"] > created[0]["seq"]:
            return ["ledger: a2 was created without a wait_for_fence on a1 before it"]
        acked = any(e["type"] == "attempt_cancelled" and e.get("attempt_id") == "a1"
                    and e["seq"] < created[0]["seq"] for e in timeline["events"])
        lease_end = at_ms(fences[0]["at"]) + fences[0]["detail"]["retry_after_ms"]
        if not acked and at_ms(created[0]["at"]) + 1 < lease_end:
            return ["ledger: a2 was created at %s, before a1's lease ran out (%d ms after %s)"
                    % (created[0]["at"], fences[0]["detail"]["retry_after_ms"],
                       fences[0]["at"])]
        return []

    def client_disconnect(self):
        """The client leaves mid-stream: the gateway closes the upstream, then acknowledges."""
        expect = Expect(seed=self.seed, max_tokens=MAX_TOKENS, outcome="client_closed",
                        attempts=1, attempt_id="a1", final_actions=("cancel_upstream",),
                        signal="client_disconnected", upstream_cancelled=True)
        with self.running() as run_:
            configure(run_, token_delay_ms=DISCONNECT_TOKEN_DELAY_MS)
            stream = stream_completion(run_.start_gateway().url, self.seed, MAX_TOKENS,
                                       close_after=DISCONNECT_AFTER_CHUNKS)
            rid = stream.request_id
            timeline = self.settle(run_, stream)
            if timeline is not None:

                def acknowledged():
                    timeline = run_.timeline(rid)
                    return timeline if checks.upstream_cancelled(timeline) else None

                timeline = wait_until(acknowledged, SETTLE_TIMEOUT_S) or run_.timeline(rid)
                self.timelines[rid] = timeline
                if not checks.upstream_cancelled(timeline):
                    self.violations.append("ledger: a1 is %s, not cancelled (acknowledged)"
                                           % timeline["attempts"][0]["state"])
                # The gateway closed a1's connection, then acknowledged the cancel
                # (GATEWAY.md, "Choosing, probing, cancelling"): the replica stopped,
                # on its stream cut or on the attempt's state before its next token.
                if not wait_until(lambda: [e for e in events_of(run_, rid) if e["event"] in
                                           ("upstream_closed_by_router", "publish_refused")],
                                  SETTLE_TIMEOUT_S):
                    self.violations.append("replica: a1 never logged that it stopped "
                                           "(upstream_closed_by_router or publish_refused)")
            if len(stream.contents) != DISCONNECT_AFTER_CHUNKS:
                self.violations.append("client: received %d content chunks before leaving, "
                                       "expected %d" % (len(stream.contents),
                                                        DISCONNECT_AFTER_CHUNKS))
            self.check(run_, stream, timeline, expect)

    def slow_replica(self):
        """Every token slower than the soft timeout (but faster than the stall timeout)."""
        timing = self.stack.timing
        token_delay_ms = timing.soft_timeout_ms + 300
        assert token_delay_ms < timing.stall_timeout_ms - 300, timing
        expect = Expect(seed=self.seed, max_tokens=SLOW_TOKENS, outcome="complete", attempts=1,
                        attempt_id="a1", final_actions=())
        with self.running() as run_:
            configure(run_, fault={"kind": "slow", "token_delay_ms": token_delay_ms,
                                   "attempt_id": "a1"})
            stream = stream_completion(run_.start_gateway().url, self.seed, SLOW_TOKENS)
            timeline = self.settle(run_, stream)
            if timeline is not None:
                actions = [a for _, a, _ in checks.decisions(timeline)]
                if "keep_waiting" not in actions:
                    self.violations.append("ledger: no keep_waiting decision for a replica "
                                           "silent for %d ms" % token_delay_ms)
            self.check(run_, stream, timeline, expect)

    def mass_failure(self):
        """Many streams in prefill, all replicas but one killed: the pool budget holds."""
        with self.running(replicas=MASS_REPLICAS) as run_:
            # Silent past the soft timeout (keep_waiting), well within the stall timeout.
            timing = self.stack.timing
            prefill_ms = (timing.soft_timeout_ms + timing.stall_timeout_ms) // 2
            configure(run_, prefill_ms=prefill_ms, token_delay_ms=TOKEN_DELAY_MS)
            url = run_.start_gateway().url
            streams = [None] * MASS_STREAMS

            def client(i):
                streams[i] = stream_completion(url, self.seed + i, MASS_TOKENS,
                                               timeout_s=MASS_DEADLINE_S * 2)

            threads = [threading.Thread(target=client, args=(i,)) for i in range(MASS_STREAMS)]
            for thread in threads:
                thread.start()
            arrived = wait_until(lambda: sum(
                1 for r in run_.replicas for e in r.events() if e["event"] == "request"
            ) >= MASS_STREAMS, prefill_ms / 1000)
            if not arrived:
                self.violations.append("harness: the %d streams did not all reach a replica "
                                       "within the prefill" % MASS_STREAMS)
            for name in MASS_VICTIMS:
                run_.replica(name).signal(signal.SIGKILL)
            for thread in threads:
                thread.join()
            for name in MASS_VICTIMS:
                if any(e["event"] == "published" for e in run_.replica(name).events()):
                    self.violations.append("harness: %s published before it was killed: the "
                                           "prefill was too short" % name)
            summaries = [self.mass_stream(run_, i, s) for i, s in enumerate(streams)]
        self.violations += self.pool_budget(summaries)
        retried = [s for s in summaries if s["outcome"] == "complete" and len(s["attempts"]) > 1]
        shown = (retried or summaries)[0]
        self.trace = dict(shown.pop("trace"), requests=summaries,
                          budget=self.budget_figures(summaries))
        for summary in summaries:
            summary.pop("trace", None)

    def mass_stream(self, run_, index, stream):
        """Checks one of the mass_failure streams; returns its summary."""
        timeline = self.settle(run_, stream)
        attempts = [] if timeline is None else timeline["attempts"]
        n = len(attempts)
        if stream.status == 200:
            expect = Expect(seed=self.seed + index, max_tokens=MASS_TOKENS, outcome="complete",
                            attempts=n, attempt_id="a%d" % n,
                            final_actions=("retry_prefill",) * (n - 1), signal="upstream_closed",
                            rerun_signal="replica_exited")
        else:
            expect = Expect(seed=self.seed + index, max_tokens=MASS_TOKENS, outcome="rejected",
                            attempts=n, attempt_id=None,
                            final_actions=("retry_prefill",) * (n - 1) + ("reject",),
                            signal="upstream_closed", rerun_signal="replica_exited",
                            error_code="retry_budget_exhausted")
        before = len(self.violations)
        self.check(run_, stream, timeline, expect)
        if stream.elapsed_s > MASS_DEADLINE_S:
            self.violations.append("client: stream %d took %.1f s, over the %.0f s bound"
                                   % (index, stream.elapsed_s, MASS_DEADLINE_S))
        error = (stream.error_body or {}).get("error") or {}
        return {"request_id": stream.request_id, "seed": self.seed + index,
                "http_status": stream.status, "outcome": expect.outcome,
                "error_code": error.get("code"), "attempts": [a["replica"] for a in attempts],
                "created_at": [a["created_at"] for a in attempts],
                "elapsed_s": round(stream.elapsed_s, 3),
                "ok": len(self.violations) == before, "trace": self.trace}

    @staticmethod
    def budget_figures(summaries):
        attempts = sum(len(s["attempts"]) for s in summaries)
        return {"attempts": attempts,
                "retries": sum(len(s["attempts"]) - 1 for s in summaries if s["attempts"]),
                "rejected": sum(1 for s in summaries if s["outcome"] == "rejected"),
                "allowance": checks.retry_allowance(attempts, POLICY), "policy": POLICY}

    def pool_budget(self, summaries):
        """Retries within the allowance; every stream whose replica died retried or was refused."""
        figures = self.budget_figures(summaries)
        violations = []
        if figures["retries"] > figures["allowance"]:
            violations.append("ledger: %d retries, over the pool budget's %d for %d attempts"
                              % (figures["retries"], figures["allowance"], figures["attempts"]))
        created = sorted(at_ms(t) for s in summaries for t in s["created_at"])
        if created and created[-1] - created[0] >= POLICY["window_s"] * 1000:
            violations.append("harness: the attempts spread over more than the budget's window")
        lost = [s for s in summaries if s["attempts"] and s["attempts"][0] in MASS_VICTIMS]
        if len(lost) <= figures["allowance"]:
            violations.append("harness: only %d streams lost their replica; the budget (%d) "
                              "was never put to the test" % (len(lost), figures["allowance"]))
        return violations
