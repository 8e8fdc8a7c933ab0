"""The seed's fault scenarios against real engines: build/ledger-gateway in
front of two llama.cpp engines (llama/server.mjs, real decoding, no fault
replica), on a ledgerd of the module's own, each outcome judged from three
records: what the client read, ledgerd's timeline of the request
(GET /v1/requests/{rid} with a router token of the test's tenant), and each
engine's log of every token it computed, event it wrote and close it saw.

What each scenario must show (GATEWAY.md, DESIGN.md's failover policy):

1. a kill in prefill, before the first byte: a rerun (a2), and the client
   gets a2's whole answer, every chunk of one generation;
2. a kill once a token is computed, before its event is written: at token 0,
   as 1; at token 3, after the first delta: the stream ends with
   upstream_decode_interrupted and no [DONE], and no engine starts a second
   generation (no a2);
3. a kill right after the first delta is written: as 2 at token 3;
4. a partition (SIGSTOP, the process alive): before the first byte, the
   stall timeout, heartbeat_timeout, wait_for_fence until a1's lease runs
   out, then a2 elsewhere, and the woken engine's output never reaches the
   client; after the first delta, the stream ends as in 2;
5. a client that leaves mid-stream: the engine sees its connection closed
   and computes nothing more, and a1 ends cancelled; what ledgerd records as
   delivered is what was written to the client (the kept answer);
6. a whole answer (no "stream"), with a key: one JSON answer, kept in ledgerd.

Each engine samples with a seed of its own (`--seed`; the client's body
names none), so the same request gets another text on each: the text a
client reads names the engine, and so the attempt, that produced it, and a
fragment of another attempt's text would show. A fault aimed at the first
attempt is armed on the engine round robin sends it to (a warm-up request
shows whose turn it is; ledgerd's a1 confirms it).

`-s` prints each scenario's trace: the chunks the client got (how many, of
which attempt), the attempts in ledgerd and what each engine logged.
"""
import base64
import http.client
import json
import signal
import socket
import sys
import threading
import time
import urllib.parse
from datetime import datetime
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "llama"))
sys.path.insert(0, str(HERE.parent / "faults"))

from clients import Event, Stream, stream_completion  # noqa: E402  (tests/faults: the SSE client)
from llama_engine import LlamaEngine, install, model  # noqa: E402
from stack import GATEWAY, Process, Stack, Timing, clean_env, http_json, wait_until  # noqa: E402

# Short clocks: a partition is over in about two seconds. The real engine's
# prefill of these prompts takes milliseconds, far within the soft timeout.
TIMING = Timing(lease_ms=2000, soft_timeout_ms=400, stall_timeout_ms=1500)
PROBE_INTERVAL_MS = 200
ENGINES = 2
MAX_TOKENS = 12
PROMPT = [{"role": "user", "content": "Open a ticket for the fault drill."}]
SETTLE_S = 15
# Clocks of two processes compared: ledgerd writes milliseconds.
CLOCK_SLACK_S = 0.005


def body(max_tokens=MAX_TOKENS, stream=True):
    """The client's request: no seed, so that each engine answers with its own."""
    return {"model": "tiny-llama", "messages": PROMPT, "max_tokens": max_tokens,
            "stream": stream}


def at_s(timestamp):
    """Seconds since the epoch of an RFC 3339 timestamp of ledgerd."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("gateway-llama"), TIMING)
    yield s
    s.close()


def start_engines(folder, flags):
    """ENGINES engines, llama-1 with --seed 101, llama-2 with 102, ...; started
    side by side, since each takes seconds to load its model."""
    install()
    model()
    engines = [None] * ENGINES
    errors = []

    def start(i):
        try:
            engines[i] = LlamaEngine(folder / ("llama-%d.log" % (i + 1)), "--seed", str(101 + i),
                                     *flags)
            engines[i].name = "llama-%d" % (i + 1)
        except BaseException as e:  # raised again below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(ENGINES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        for engine in engines:
            if engine is not None:
                engine.stop()
        raise errors[0]
    return engines


class Pool:
    """Real engines behind a gateway of their own, for one test, on a fresh tenant."""

    def __init__(self, stack, folder, engine_flags=(), gateway_flags=()):
        self.stack = stack
        self.folder = Path(folder)
        self.token = stack.new_tenant_token()
        self.engines = []
        self.gateway = None
        self.marks = {}
        try:
            self.engines = start_engines(self.folder, engine_flags)
            argv = [GATEWAY, "--listen", "127.0.0.1:0", "--ledger-url", stack.ledger_url,
                    "--probe-interval-ms", PROBE_INTERVAL_MS, "--lease-ms", TIMING.lease_ms,
                    "--soft-timeout-ms", TIMING.soft_timeout_ms,
                    "--stall-timeout-ms", TIMING.stall_timeout_ms, *gateway_flags]
            for engine in self.engines:
                argv += ["--replica", "%s=%s" % (engine.name, engine.url)]
            env = dict(clean_env(), LEDGER_TOKEN=self.token, GATEWAY_KEY_SECRET="k" * 32)
            self.gateway = Process(argv, self.folder / "gateway.log", env=env).wait_ready()
            if not wait_until(self.all_healthy, 15, 0.05):
                raise RuntimeError("the gateway did not find its engines healthy: %s"
                                   % (self.readiness(),))
            # Each engine's own answer to the request, asked directly: the text
            # that names it when it reaches a client through the gateway.
            self.reference = {}
            for engine in self.engines:
                answer = engine.stream(body())
                assert answer.complete and len(answer.contents) == MAX_TOKENS
                self.reference[engine.name] = answer.contents
            texts = [tuple(t) for t in self.reference.values()]
            assert len(set(texts)) == len(texts), "two engines gave the same text"
            self.mark()
        except BaseException:
            self.close()
            raise

    @property
    def url(self):
        return self.gateway.url

    def readiness(self):
        return http_json(self.url, path="/readyz")

    def all_healthy(self):
        status, ready = self.readiness()
        states = [r["state"] for r in (ready or {}).get("replicas", [])]
        return status == 200 and states == ["healthy"] * ENGINES

    def engine(self, name):
        return next(e for e in self.engines if e.name == name)

    def mark(self):
        """From now on, completions() counts only what the engines get after this."""
        self.marks = {e.name: len(e.lines("request")) for e in self.engines}

    def completions(self, engine):
        """The engine's request ids of the completions it was asked since the mark."""
        return [line["request_id"] for line in engine.lines("request")[self.marks[engine.name]:]
                if line["path"] == "/v1/chat/completions"]

    def warm_up(self):
        """One completion through the gateway; returns the engine whose turn is next.

        Ties go round robin (GATEWAY.md, "Choosing"): with two engines and none
        busy, the next request goes to the one this did not.
        """
        stream = stream_completion(self.url, None, MAX_TOKENS, body=body())
        assert stream.status == 200 and stream.done, stream
        served = [e for e in self.engines if self.completions(e)]
        assert len(served) == 1, "the warm-up reached %d engines" % len(served)
        assert stream.contents == self.reference[served[0].name]
        settled = self.settled(stream.request_id)
        assert settled is not None and settled["request"]["status"] == "completed"
        self.mark()
        return next(e for e in self.engines if e is not served[0])

    def timeline(self, rid):
        path = "/v1/requests/" + urllib.parse.quote(rid, safe="")
        status, page = http_json(self.stack.ledger_url, path=path, token=self.token)
        return page if status == 200 else None

    def settled(self, rid, timeout_s=SETTLE_S):
        """The timeline once the request is no longer open, else None."""
        def closed():
            t = self.timeline(rid)
            return t if t is not None and t["request"]["status"] != "open" else None
        return wait_until(closed, timeout_s)

    def open_request_ids(self):
        status, page = http_json(self.stack.ledger_url, path="/v1/requests?status=open",
                                 token=self.token)
        return [item["request_id"] for item in page["items"]] if status == 200 else []

    def answer(self, rid):
        path = "/v1/requests/%s/answer" % urllib.parse.quote(rid, safe="")
        return http_json(self.stack.ledger_url, path=path, token=self.token)

    def engine_summary(self, engine):
        """What one engine logged of the test's completions: the trace's engine part."""
        out = {"completions": []}
        for rid in self.completions(engine):
            lines = engine.lines(request_id=rid)
            closed = [x for x in lines if x["event"] == "client_closed"]
            fault = [x for x in lines if x["event"] == "fault"]
            done = [x for x in lines if x["event"] == "done"]
            out["completions"].append({
                "request_id": rid,
                "tokens_computed": sum(1 for x in lines if x["event"] == "token"),
                "content_written": sum(1 for x in lines if x["event"] == "write"
                                       and x["kind"] in ("content", "json")),
                "client_closed": ({"tokens_computed": closed[0]["tokens_computed"],
                                   "decode_in_flight": closed[0]["decode_in_flight"]}
                                  if closed else None),
                "killed_at": ("%s:%d" % (fault[0]["phase"], fault[0]["token_index"])
                              if fault else None),
                "done": done[0]["finish_reason"] if done else None,
            })
        out["alive"] = engine.alive()
        return out

    def trace(self, scenario, rid, client):
        """Prints the scenario's trace (shown by -s) and returns it."""
        timeline = self.timeline(rid) if rid else None
        contents = client.pop("contents", None)
        if contents and timeline is not None:
            # The attempt whose engine's own text the client's is.
            client["from"] = ["%s@%s" % (a["attempt_id"], a["replica"])
                              for a in timeline["attempts"]
                              if names_engine(contents, self.reference[a["replica"]])]
        trace = {
            "scenario": scenario,
            "request_id": rid,
            "client": client,
            "ledger": None if timeline is None else {
                "request": timeline["request"]["status"],
                "delivered_output_tokens": timeline["request"]["delivered_output_tokens"],
                "attempts": [{"attempt_id": a["attempt_id"], "state": a["state"],
                              "replica": a["replica"]} for a in timeline["attempts"]],
                "decisions": decisions(timeline),
            },
            "engines": {e.name: self.engine_summary(e) for e in self.engines},
            "folder": str(self.folder),
        }
        print("\nTRACE " + json.dumps(trace))
        return trace

    def close(self):
        """Stops every process; returns the gateway's exit status (0: a clean stop)."""
        rc = self.gateway.stop() if self.gateway is not None else None
        self.gateway = None
        for engine in self.engines:
            engine.stop()
        return rc


@pytest.fixture
def pool_of(stack, tmp_path):
    pools = []

    def make(**kw):
        pools.append(Pool(stack, tmp_path, **kw))
        return pools[-1]

    yield make
    # SIGTERM ends a gateway cleanly: one that crashed meanwhile shows here.
    assert [p.close() for p in pools] == [0] * len(pools)


# --- what the records show ---------------------------------------------------


def chunk_ids(stream):
    """The engine's completion ids of the chunks the client got: one per generation."""
    return sorted({c["id"] for c in stream.chunk_events})


def read_then_leave(url, request, chunks, linger_s):
    """A client that reads @chunks chunk events of a stream, stops reading, and
    closes its connection @linger_s later: what it got, as a Stream."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=20)
    stream = Stream()
    started = time.monotonic()
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(request),
                     {"Content-Type": "application/json", "Accept": "text/event-stream"})
        response = conn.getresponse()
        stream.head_at = time.time()
        stream.status = response.status
        stream.headers = {k.lower(): v for k, v in response.getheaders()}
        data, event_id = [], None
        while len(stream.chunk_events) < chunks:
            line = response.readline()
            if not line:
                stream.transport_error = "the stream ended before the client left"
                break
            line = line.decode("utf-8").rstrip("\r\n")
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif line.startswith("id:"):
                event_id = int(line[3:].strip())
            elif line == "" and data:
                stream.events.append(Event(time.monotonic() - started, "\n".join(data), event_id))
                data, event_id = [], None
        time.sleep(linger_s)
        stream.closed_by_client = True
        conn.sock.shutdown(socket.SHUT_RDWR)
    finally:
        conn.close()
        stream.elapsed_s = time.monotonic() - started
    return stream


def names_engine(contents, reference):
    """Whether the text a client got (its tokens, or one whole string) is the
    engine's of @reference, as far as both go."""
    if isinstance(contents, str):
        reference = "".join(reference)
    n = min(len(contents), len(reference))
    return n > 0 and contents[:n] == reference[:n]


def client_record(stream):
    final = stream.final_event
    return {"contents": stream.contents, "http_status": stream.status,
            "content_chunks": len(stream.contents),
            "generations": len(chunk_ids(stream)), "done": stream.done,
            "final_error": (final or {}).get("error", {}).get("code")
            if isinstance(final, dict) else None}


def decisions(timeline):
    return [(e.get("attempt_id"), e["detail"].get("signal"), e["detail"].get("action"))
            for e in timeline["events"] if e["type"] == "failover_decision"]


def tokens_of(engine, rid):
    return [t["text"] for t in engine.lines("token", rid)]


def assert_numbered(stream):
    """Every event has its id, from 1 on, [DONE] and a final error included."""
    assert [e.id for e in stream.events] == list(range(1, len(stream.events) + 1))


def assert_whole_answer_from_one_engine(pool, stream, timeline, attempt_id):
    """The client read one whole answer, all of it from the engine of @attempt_id."""
    assert stream.status == 200 and stream.transport_error is None, stream
    assert stream.done and stream.events[-1].data == "[DONE]"
    assert_numbered(stream)
    replica = next(a["replica"] for a in timeline["attempts"] if a["attempt_id"] == attempt_id)
    engine = pool.engine(replica)
    # One generation: every chunk carries the same completion id ...
    assert len(chunk_ids(stream)) == 1, chunk_ids(stream)
    # ... and it is the engine's own text, whole: not another engine's, nor a splice.
    assert stream.contents == pool.reference[replica]
    (served,) = pool.completions(engine)
    assert stream.contents == tokens_of(engine, served)
    assert timeline["request"]["status"] == "completed"
    assert timeline["request"]["delivered_output_tokens"] == MAX_TOKENS
    return engine


def assert_terminated_after(stream, timeline, delivered):
    """The stream ended with the interrupted error after @delivered tokens, no [DONE]."""
    assert stream.status == 200 and not stream.done, stream
    assert stream.transport_error is None, stream.transport_error
    assert_numbered(stream)
    assert len(stream.contents) == delivered
    error = stream.final_event["error"]
    assert error["code"] == "upstream_decode_interrupted"
    assert error["delivered_output_tokens"] == delivered
    assert error["partial_output"] is True and error["retryable"] is False
    assert error["request_id"] == stream.request_id
    assert timeline["request"]["status"] == "terminated"
    assert timeline["request"]["delivered_output_tokens"] == delivered


def kill_run(pool, phase, at=0):
    """Arms the one-shot hook on the engine a1 goes to, streams the request, and
    waits for that engine's death; returns (stream, timeline, victim, the victim's
    own id of the request)."""
    victim = pool.warm_up()
    victim.set_fault(phase, at=at)
    pool.mark()
    stream = stream_completion(pool.url, None, MAX_TOKENS, body=body())
    assert victim.wait_exit() == -signal.SIGKILL, "the %s hook did not fire" % phase
    timeline = pool.settled(stream.request_id)
    assert timeline is not None, "request %s still open" % stream.request_id
    a1 = timeline["attempts"][0]
    assert (a1["attempt_id"], a1["replica"]) == ("a1", victim.name), \
        "a1 went to %s, not to %s whose turn it was" % (a1["replica"], victim.name)
    (served,) = pool.completions(victim)
    fault = victim.lines("fault", served)
    assert [(f["phase"], f["token_index"]) for f in fault] == [(phase, at)]
    return stream, timeline, victim, served


def assert_rerun(pool, stream, timeline, victim):
    """Nothing of a1 reached the client; a2 on the other engine gave the whole answer."""
    assert [a["attempt_id"] for a in timeline["attempts"]] == ["a1", "a2"]
    assert timeline["attempts"][1]["replica"] != victim.name
    assert timeline["attempts"][1]["state"] == "finished"
    assert timeline["attempts"][0]["state"] in ("dead", "superseded")
    assert decisions(timeline) == [("a1", "upstream_closed", "retry_prefill")]
    other = assert_whole_answer_from_one_engine(pool, stream, timeline, "a2")
    assert other is not victim


def assert_no_second_generation(pool, timeline, victim):
    """No a2 in ledgerd, and no other engine was asked for the request."""
    assert [a["attempt_id"] for a in timeline["attempts"]] == ["a1"]
    for engine in pool.engines:
        if engine is not victim:
            assert pool.completions(engine) == [], "%s started a generation" % engine.name


# --- the scenarios ---------------------------------------------------------------


def test_1_a_kill_in_prefill_reruns_and_the_client_gets_a2s_whole_answer(pool_of):
    pool = pool_of()
    stream, timeline, victim, served = kill_run(pool, "prefill")
    pool.trace("1 prefill kill", stream.request_id, client_record(stream))
    # The victim computed nothing: it died with the prompt handed to llama.cpp.
    assert victim.lines("prefill", served) and victim.lines("token", served) == []
    assert victim.lines("write", served) == []
    assert_rerun(pool, stream, timeline, victim)


def test_2a_token_0_computed_not_sent_reruns_and_nothing_of_a1_shows(pool_of):
    pool = pool_of()
    stream, timeline, victim, served = kill_run(pool, "after_compute", 0)
    pool.trace("2a after_compute:0", stream.request_id, client_record(stream))
    # a1 computed its first token, which never left the engine.
    assert len(tokens_of(victim, served)) == 1 and victim.lines("write", served) == []
    assert_rerun(pool, stream, timeline, victim)
    assert stream.contents[0] != tokens_of(victim, served)[0], \
        "the engines' first tokens are equal: a1's could not be told from a2's"


def test_2b_a_token_computed_not_sent_after_the_first_delta_terminates(pool_of):
    pool = pool_of()
    stream, timeline, victim, served = kill_run(pool, "after_compute", 3)
    pool.trace("2b after_compute:3", stream.request_id, client_record(stream))
    # Tokens 0..2 reached the client; token 3, computed, did not.
    computed = tokens_of(victim, served)
    assert len(computed) == 4
    assert_terminated_after(stream, timeline, 3)
    assert stream.contents == computed[:3]
    assert len(chunk_ids(stream)) == 1
    assert decisions(timeline) == [("a1", "upstream_closed", "terminate_stream")]
    assert_no_second_generation(pool, timeline, victim)


def test_3_a_kill_right_after_the_first_delta_terminates_without_a_rerun(pool_of):
    pool = pool_of()
    stream, timeline, victim, served = kill_run(pool, "after_send", 0)
    pool.trace("3 after_send:0", stream.request_id, client_record(stream))
    assert tokens_of(victim, served) == stream.contents == pool.reference[victim.name][:1]
    assert_terminated_after(stream, timeline, 1)
    assert decisions(timeline) == [("a1", "upstream_closed", "terminate_stream")]
    assert_no_second_generation(pool, timeline, victim)


def test_4a_a_partition_before_the_first_byte_is_fenced_then_rerun(pool_of):
    """The engine a1 goes to is stopped (SIGSTOP) as the request is sent: its
    silence passes the stall timeout (heartbeat_timeout), ledgerd answers
    wait_for_fence, the gateway closes the connection and waits the lease out,
    then a2 runs elsewhere. Woken inside that window, the engine finds its
    connection closed: nothing it does reaches the client."""
    pool = pool_of()
    victim = pool.warm_up()
    victim.signal(signal.SIGSTOP)
    assert wait_until(lambda: victim.process.state() == "T", 2)
    pool.mark()
    streams = []
    client = threading.Thread(target=lambda: streams.append(
        stream_completion(pool.url, None, MAX_TOKENS, body=body())))
    client.start()
    # The head waits for a2's first event: the request id comes from ledgerd.
    rids = wait_until(pool.open_request_ids, 5)
    assert rids and len(rids) == 1, rids
    rid = rids[0]

    def fenced():
        t = pool.timeline(rid)
        waits = [d for d in decisions(t) if d[2] == "wait_for_fence"]
        return t if waits and len(t["attempts"]) == 1 else None

    window = wait_until(fenced, TIMING.stall_timeout_ms / 1000 + 5)
    woken_at = time.time()
    victim.signal(signal.SIGCONT)
    client.join(timeout=30)
    (stream,) = streams
    assert window is not None, "a1 was never fenced before a rerun: %s" % decisions(
        pool.timeline(rid))
    assert window["attempts"][0]["replica"] == victim.name
    timeline = pool.settled(rid)
    (served,) = pool.completions(victim)
    # The woken engine saw its connection closed and stopped.
    closed = victim.wait_line("client_closed", served, timeout_s=5)
    victim.wait_line("done", served, timeout_s=5)
    pool.trace("4a partition before first byte", rid, dict(
        client_record(stream), woken_after_fence_s=round(woken_at - at_s(next(
            e["at"] for e in window["events"] if e["type"] == "failover_decision"
            and e["detail"].get("action") == "wait_for_fence")), 3)))

    assert stream.request_id == rid
    assert [a["attempt_id"] for a in timeline["attempts"]] == ["a1", "a2"]
    assert timeline["attempts"][1]["replica"] != victim.name
    kept = [d for d in decisions(timeline) if d[2] not in ("keep_waiting", "wait_for_fence")]
    assert kept == [("a1", "heartbeat_timeout", "retry_prefill")], decisions(timeline)
    assert ("a1", "heartbeat_timeout", "wait_for_fence") in decisions(timeline)
    # a2 was created only once a1's lease had run out: nobody acknowledged a1's cancel.
    events = timeline["events"]
    fence = next(e for e in events if e["type"] == "failover_decision"
                 and e["detail"].get("action") == "wait_for_fence")
    created = next(e for e in events if e["type"] == "attempt_created"
                   and e.get("attempt_id") == "a2")
    assert not any(e["type"] == "attempt_cancelled" and e.get("attempt_id") == "a1"
                   for e in events)
    assert at_s(created["at"]) + CLOCK_SLACK_S >= at_s(fence["at"]) + \
        fence["detail"]["retry_after_ms"] / 1000
    assert_whole_answer_from_one_engine(pool, stream, timeline, "a2")
    # The zombie wrote nothing of its own answer after waking, and what it
    # computed (at most the one decode already running) stayed with it.
    lines = victim.lines(request_id=served)
    late = [x for x in lines[lines.index(closed):] if x["event"] == "token"]
    assert len(late) == (1 if closed["decode_in_flight"] else 0)
    assert victim.lines("write", served) == []


def test_4b_a_partition_after_the_first_delta_terminates_and_the_woken_engine_is_cut_off(
        pool_of):
    """Stopped mid-stream, the engine is silent past the stall timeout after a
    delta: the stream ends with upstream_decode_interrupted, with no rerun; woken,
    the engine finds its connection closed, and none of its later text shows."""
    pool = pool_of(engine_flags=("--delay-ms-per-token", "30"))
    victim = pool.warm_up()
    pool.mark()
    streams = []
    client = threading.Thread(target=lambda: streams.append(
        stream_completion(pool.url, None, 60, body=body(60))))
    client.start()
    assert wait_until(lambda: pool.completions(victim) and len(
        victim.lines("write", pool.completions(victim)[0])) >= 4, 5)
    victim.signal(signal.SIGSTOP)
    assert wait_until(lambda: victim.process.state() == "T", 2)
    (served,) = pool.completions(victim)
    stopped_after = len(victim.lines("token", served))
    client.join(timeout=30)
    (stream,) = streams
    timeline = pool.settled(stream.request_id)
    victim.signal(signal.SIGCONT)
    closed = victim.wait_line("client_closed", served, timeout_s=5)
    victim.wait_line("done", served, timeout_s=5)
    pool.trace("4b partition after first delta", stream.request_id, dict(
        client_record(stream), tokens_when_stopped=stopped_after))

    assert timeline["attempts"][0]["replica"] == victim.name
    sent = [w["token_index"] for w in victim.lines("write", served) if w["kind"] == "content"]
    assert_terminated_after(stream, timeline, len(stream.contents))
    # The client got exactly what the engine wrote before it stopped, in order.
    assert stream.contents == tokens_of(victim, served)[:len(stream.contents)]
    assert len(stream.contents) <= len(sent) and len(stream.contents) >= 3
    kept = [d for d in decisions(timeline) if d[2] != "keep_waiting"]
    assert kept == [("a1", "heartbeat_timeout", "terminate_stream")], decisions(timeline)
    assert_no_second_generation(pool, timeline, victim)
    lines = victim.lines(request_id=served)
    late = [x for x in lines[lines.index(closed):] if x["event"] == "token"]
    assert len(late) == (1 if closed["decode_in_flight"] else 0)
    assert [x for x in lines[lines.index(closed):] if x["event"] == "write"] == []


@pytest.fixture(scope="module")
def client_left(stack, tmp_path_factory):
    """A keyless stream whose client stops reading after 3 tokens and closes its
    connection 10 ms later, on an engine that takes 40 ms a token: the stream
    is still going when the client leaves, and the client is gone some 30 ms
    before the next token comes. What each side recorded of it, once the
    engine stopped and the request settled."""
    pool = Pool(stack, tmp_path_factory.mktemp("client-left"),
                engine_flags=("--delay-ms-per-token", "40"),
                gateway_flags=("--resume-hold-ms", "0"))
    try:
        pool.warm_up()
        stream = read_then_leave(pool.url, body(400), 4, 0.010)  # the role and 3 tokens
        left_at = time.time()
        rid = stream.request_id

        def acknowledged():
            t = pool.timeline(rid)
            return t if t is not None and t["attempts"][0]["state"] == "cancelled" else None

        acked = wait_until(acknowledged, SETTLE_S)
        served = [(e, r) for e in pool.engines for r in pool.completions(e)]
        closed = aborted = None
        if len(served) == 1:
            engine, r = served[0]
            closed = engine.wait_line("client_closed", r, timeout_s=5)
            aborted = engine.wait_line("aborted", r, timeout_s=5)
            time.sleep(0.2)  # a token computed after "aborted" would show by now
        timeline = acked or pool.settled(rid) or pool.timeline(rid)
        pool.trace("5 client leaves", rid, dict(
            client_record(stream),
            engine_saw_close_after_s=None if closed is None else round(closed["ts"] - left_at,
                                                                        3)))
        yield {"pool": pool, "stream": stream, "timeline": timeline, "acked": acked,
               "served": served, "closed": closed, "aborted": aborted}
    finally:
        rc = pool.close()
    assert rc == 0, "the gateway's exit status on SIGTERM: %s" % rc


def test_5_a_client_that_leaves_stops_the_engine_and_the_cancel_is_acknowledged(client_left):
    """The gateway closes the engine's connection (the engine logs client_closed
    and computes nothing after it but the decode already running), then
    acknowledges ledgerd's cancel: a1 ends cancelled."""
    stream, timeline = client_left["stream"], client_left["timeline"]
    assert stream.closed_by_client and len(stream.contents) == 3
    assert stream.status == 200 and len(chunk_ids(stream)) == 1
    assert client_left["acked"] is not None, \
        "a1 is %s, not cancelled" % timeline["attempts"][0]["state"]
    ((engine, served),) = client_left["served"]
    closed, aborted = client_left["closed"], client_left["aborted"]
    assert stream.contents == tokens_of(engine, served)[:3]
    assert [(a["attempt_id"], a["replica"]) for a in timeline["attempts"]] == [
        ("a1", engine.name)]
    assert decisions(timeline) == [("a1", "client_disconnected", "cancel_upstream")]
    assert timeline["request"]["status"] == "terminated"
    assert timeline["request"]["client_error"]["error"]["code"] == "client_disconnected"
    # The engine stopped at once: after the close, only the decode already running.
    lines = engine.lines(request_id=served)
    late = [x for x in lines[lines.index(closed):] if x["event"] == "token"]
    assert len(late) == (1 if closed["decode_in_flight"] else 0)
    assert aborted["tokens_computed"] == closed["tokens_computed"] + len(late)
    assert len(engine.lines("token", served)) == aborted["tokens_computed"] < 100
    # The connection was closed, then the cancel acknowledged. The engine logs the
    # close when its event loop gets to it: a quarter second of room for that,
    # against the 16 s the stream would have run on had it not been closed.
    ack = next(e for e in timeline["events"] if e["type"] == "attempt_cancelled")
    assert closed["ts"] <= at_s(ack["at"]) + 0.25, (closed["ts"], ack["at"])


def test_5b_the_tokens_recorded_as_delivered_are_those_written_to_the_client(client_left):
    """When a client leaves, what ledgerd records as delivered (the request's
    delivered_output_tokens, and the client_error's) is what was written to the
    client: the tokens of the kept answer, recorded in the same decision
    (API.md 1.1: "the events written to a client so far"). A token the engine
    sent after the client left was written to no one ("the gateway never
    delivers to no one")."""
    stream, timeline, pool = client_left["stream"], client_left["timeline"], client_left["pool"]
    status, kept = pool.answer(stream.request_id)
    assert status == 200 and kept["kept"] is True, kept
    written = [json.loads(line[len("data: "):])
               for line in base64.b64decode(kept["body_b64"]).decode().split("\n")
               if line.startswith("data: {")]
    written_tokens = sum(1 for c in written
                         if (c.get("choices") or [{}])[0].get("delta", {}).get("content"))
    assert len(stream.contents) == 3 <= written_tokens
    recorded = (timeline["request"]["delivered_output_tokens"],
                timeline["request"]["client_error"]["error"]["delivered_output_tokens"])
    assert recorded == (written_tokens, written_tokens), \
        "ledgerd records %s tokens delivered; the kept answer (the events written to the " \
        "client) holds %d, the client read %d" % (recorded, written_tokens, len(stream.contents))


def test_6_a_whole_answer_through_the_real_engine_is_kept(pool_of):
    pool = pool_of()
    pool.warm_up()
    parts = urllib.parse.urlsplit(pool.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=20)
    try:
        # With a key: only a request a client can repeat keeps its answer.
        conn.request("POST", "/v1/chat/completions", json.dumps(body(stream=False)),
                     {"Content-Type": "application/json",
                      "Idempotency-Key": "whole-%d" % time.time_ns()})
        response = conn.getresponse()
        status, data = response.status, response.read()
        headers = {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()
    rid = headers.get("x-request-id")
    answer = json.loads(data)
    timeline = pool.settled(rid)
    (engine,) = [e for e in pool.engines if pool.completions(e)]
    (served,) = pool.completions(engine)
    pool.trace("6 whole answer", rid, {"contents": answer["choices"][0]["message"]["content"],
                                       "http_status": status, "bytes": len(data),
                                       "completion_tokens": answer["usage"]["completion_tokens"]})

    assert status == 200 and headers["content-type"].startswith("application/json")
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["content"] == "".join(tokens_of(engine, served))
    assert answer["choices"][0]["message"]["content"] == "".join(pool.reference[engine.name])
    assert [w["kind"] for w in engine.lines("write", served)] == ["json"]
    assert timeline["request"]["status"] == "completed"
    assert [(a["attempt_id"], a["state"], a["replica"]) for a in timeline["attempts"]] == [
        ("a1", "finished", engine.name)]
    assert timeline["request"]["delivered_output_tokens"] == MAX_TOKENS
    status, kept = pool.answer(rid)
    assert status == 200 and kept["kept"] is True and kept["status"] == 200
    assert base64.b64decode(kept["body_b64"]) == data
