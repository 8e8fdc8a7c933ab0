"""The asyncio client (ledger_client.aio) against a live ledgerd.

The blocking client's behaviours that matter, through AsyncLedger:
executed, replayed, failed, Retryable, NotExecuted, in progress with and
without waiting, unknown, args mismatch, fenced attempt, unreachable, a
lost answer sent again, a database outage waited out, a result not kept,
the claim renewed by a task while a long tool runs, the decorator of an
``async def`` tool, and the router's attempts through a whole failover
with a heartbeat task. And races: many coroutines claiming one key run
the tool once, all the others get its result back or are told to wait.

Each test runs its coroutine with asyncio.run: one event loop per test.
Router tests work in tenants of their own (the retry budget is per tenant).
"""

import asyncio
import json
import sys
import threading
import time
from pathlib import Path

import pytest

from answer_thief import AnswerThief
from conftest import claim_id, free_port, new_id

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "sdk" / "python"))

from ledger_client import (  # noqa: E402
    ArgsMismatch, AttemptFenced, InProgress, Ledger, LedgerError, LedgerUnavailable,
    NotExecuted, OutcomeUnknown, RequestClosed, ResultNotKept, Retryable, ToolCallResult,
    args_sha256, stable_tool_call_id)
from ledger_client.aio import AsyncAttempt, AsyncLedger  # noqa: E402


# --- helpers ----------------------------------------------------------------


def url(service):
    return "http://%s:%d" % (service.ledgerd.host, service.ledgerd.port)


def agent(service, **kw):
    """An AsyncLedger with the agent token of tenant t1."""
    return AsyncLedger(url(service), service.token("agent"), **kw)


def router(service):
    """An AsyncLedger with a router token of a tenant of its own."""
    return AsyncLedger(url(service), service.token("router", new_id("t")))


def reviewer(service, tenant="t1"):
    """A blocking Ledger that may read every request of @tenant: the ground truth."""
    return Ledger(url(service), service.token("router", tenant))


def key():
    return new_id("r"), new_id("c")


def tool_path(rid, cid, action):
    return "/v1/requests/%s/tool-calls/%s/%s" % (rid, cid, action)


def raw_claim(service, rid, cid, **fields):
    """A claim by another holder, over plain HTTP; returns the answer."""
    fields.setdefault("claim_id", claim_id())
    return service.ledgerd.post(tool_path(rid, cid, "claim"), fields,
                                token=service.token("agent"))


def event_types(service, rid):
    return [e["type"] for e in reviewer(service).get_request(rid)["events"]]


def run(coro):
    return asyncio.run(coro)


async def must_not_run(idempotency_key, fencing_token):
    pytest.fail("the tool ran again for %s" % idempotency_key)


class Tool:
    """An async tool function that counts its calls, sleeps @delay_s, returns @result."""

    def __init__(self, result=None, error=None, delay_s=0.0):
        self.calls = []
        self.result = result
        self.error = error
        self.delay_s = delay_s

    async def __call__(self, idempotency_key, fencing_token):
        self.calls.append((idempotency_key, fencing_token))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.error is not None:
            raise self.error
        return self.result


# --- tool calls ---------------------------------------------------------------


def test_executed_then_replayed_with_the_same_text(service):
    rid, cid = key()
    tool = Tool({"message_id": "m-1", "n": [1, 2]})

    async def main():
        async with agent(service) as led:
            first = await led.tool_call(rid, cid, tool, tool="send_email", args={"to": "a"},
                                        owner="mailer@pod-7")
            again = await led.tool_call(rid, cid, must_not_run, tool="send_email",
                                        args={"to": "a"})
            view = await led.get_tool_call(rid, cid)
            return first, again, view

    first, again, view = run(main())
    assert tool.calls == [("%s:%s" % (rid, cid), 1)]
    assert (first.executed, first.replayed, first.outcome, first.recorded) == (
        True, False, "succeeded", True)
    assert first.result == {"message_id": "m-1", "n": [1, 2]} and first.fencing_token == 1
    assert (again.executed, again.replayed, again.outcome) == (False, True, "succeeded")
    assert again.result_json == first.result_json and again.fencing_token is None
    assert view["state"] == "succeeded" and view["tool"] == "send_email"
    assert view["args_sha256"] == args_sha256({"to": "a"})
    assert event_types(service, rid) == ["claimed", "completed"]


def test_a_plain_function_is_a_tool_too(service):
    rid, cid = key()
    r = run(agent(service).tool_call(rid, cid, lambda k, t: {"key": k, "token": t}))
    assert r.executed and r.result == {"key": "%s:%s" % (rid, cid), "token": 1}


def test_failure_is_recorded_reraised_then_replayed_as_failed(service):
    rid, cid = key()
    tool = Tool(error=ValueError("mailbox full"))

    async def main():
        led = agent(service)
        with pytest.raises(ValueError, match="mailbox full"):
            await led.tool_call(rid, cid, tool, tool="send_email")
        return await led.tool_call(rid, cid, must_not_run, tool="send_email")

    r = run(main())
    assert len(tool.calls) == 1
    assert (r.executed, r.replayed, r.outcome) == (False, True, "failed")
    assert r.result == {"error": "ValueError", "message": "mailbox full"}


def test_retryable_releases_then_a_new_holder_runs(service):
    rid, cid = key()
    tool = Tool({"sent": True})

    async def main():
        led = agent(service)
        with pytest.raises(Retryable):
            await led.tool_call(rid, cid, Tool(error=Retryable("smtp timeout")))
        assert (await led.get_tool_call(rid, cid))["state"] == "released"
        return await led.tool_call(rid, cid, tool)

    r = run(main())
    assert tool.calls == [("%s:%s" % (rid, cid), 2)] and r.executed
    assert event_types(service, rid) == ["claimed", "released", "claimed", "completed"]


def test_not_executed_releases_the_key_with_its_reason(service):
    rid, cid = key()

    async def main():
        led = agent(service)
        with pytest.raises(NotExecuted, match="invalid address"):
            await led.tool_call(rid, cid, Tool(error=NotExecuted("invalid address")))
        return await led.tool_call(rid, cid, Tool("done"))

    r = run(main())
    assert r.executed and r.result == "done" and r.fencing_token == 2
    events = reviewer(service).get_request(rid)["events"]
    assert events[1]["type"] == "released" and events[1]["detail"]["reason"] == "invalid address"


def test_in_progress_without_waiting_raises_with_the_retry_hint(service):
    rid, cid = key()
    assert raw_claim(service, rid, cid, owner="other@pod-2", lease_ms=10000).status == 201
    tool = Tool()
    with pytest.raises(InProgress) as e:
        run(agent(service).tool_call(rid, cid, tool, wait_s=0))
    assert tool.calls == []
    assert e.value.status == 409 and 0 < e.value.retry_after_ms <= 10000
    assert e.value.details["holder"]["owner"] == "other@pod-2"


def test_in_progress_waits_without_blocking_the_loop_and_replays(service):
    rid, cid = key()
    r = raw_claim(service, rid, cid, tool="t", lease_ms=10000)
    assert r.status == 201, r
    ticks = []

    async def ticker():
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.05)

    async def main():
        t = asyncio.create_task(ticker())

        def holder_completes():
            time.sleep(1)
            service.ledgerd.post(tool_path(rid, cid, "complete"),
                                 {"fencing_token": r.json["fencing_token"],
                                  "outcome": "succeeded", "result": {"by": "other"}},
                                 token=service.token("agent"))

        other = threading.Thread(target=holder_completes)
        other.start()
        try:
            return await agent(service).tool_call(rid, cid, must_not_run, tool="t", wait_s=5)
        finally:
            t.cancel()
            other.join()

    started = time.monotonic()
    result = run(main())
    assert 0.9 < time.monotonic() - started < 4
    assert result.replayed and result.result == {"by": "other"}
    # The loop kept running while the client waited: about 20 ticks a second.
    assert len(ticks) >= 12, len(ticks)


def test_outcome_unknown_after_the_holders_lease_ran_out(service):
    rid, cid = key()
    assert raw_claim(service, rid, cid, lease_ms=100).status == 201
    time.sleep(0.3)
    with pytest.raises(OutcomeUnknown) as e:
        run(agent(service).tool_call(rid, cid, must_not_run, wait_s=2))
    assert e.value.status == 409 and e.value.code == "outcome_unknown"


def test_other_args_on_the_same_key_is_args_mismatch(service):
    rid, cid = key()

    async def main():
        led = agent(service)
        await led.tool_call(rid, cid, Tool(1), tool="pay", args={"amount": 100})
        await led.tool_call(rid, cid, must_not_run, tool="pay", args={"amount": 200})

    with pytest.raises(ArgsMismatch) as e:
        run(main())
    assert e.value.status == 422
    assert e.value.details["expected_args_sha256"] == args_sha256({"amount": 100})


def test_unreachable_ledger_raises_ledger_unavailable_without_running(service):
    led = AsyncLedger("http://127.0.0.1:%d" % free_port(), service.token("agent"), retry_s=0.5)
    tool = Tool()
    started = time.monotonic()
    with pytest.raises(LedgerUnavailable) as e:
        run(led.tool_call(*key(), tool))
    assert 0.4 < time.monotonic() - started < 3
    assert tool.calls == [] and e.value.status is None and e.value.code == "unreachable"


def test_lost_answers_are_sent_again_with_the_same_claim_and_completion(service):
    thief = AnswerThief(service, {"claim", "complete"})
    rid, cid = key()
    tool = Tool({"sent": 1})
    try:
        r = run(AsyncLedger(thief.url, service.token("agent")).tool_call(rid, cid, tool))
    finally:
        thief.close()
    assert thief.stolen == [("claim", "HTTP/1.1 201 Created"), ("complete", "HTTP/1.1 200 OK")]
    # The claim sent again found its own holder: one run, one token.
    assert tool.calls == [("%s:%s" % (rid, cid), 1)]
    assert r.outcome == "succeeded" and r.recorded
    assert event_types(service, rid) == ["claimed", "completed"]


def test_claim_is_sent_again_through_a_database_outage(service):
    rid, cid = key()
    run(agent(service).tool_call(new_id("r"), "warm-up", Tool()))  # the token is known now
    service.cluster.stop()
    back = threading.Thread(target=lambda: (time.sleep(1), service.cluster.start()))
    back.start()
    tool = Tool("ok")
    started = time.monotonic()
    try:
        r = run(agent(service).tool_call(rid, cid, tool))
    finally:
        back.join()
    assert time.monotonic() - started > 0.9
    assert len(tool.calls) == 1 and r.outcome == "succeeded" and r.recorded


def test_renewal_task_keeps_a_long_tools_claim_alive(service):
    rid, cid = key()
    seen = []

    async def slow_tool(idempotency_key, fencing_token):
        await asyncio.sleep(1.5)  # past the 1 s lease
        seen.append(await asyncio.to_thread(raw_claim, service, rid, cid))
        await asyncio.sleep(1.0)
        return {"slow": True}

    r = run(agent(service).tool_call(rid, cid, slow_tool, lease_ms=1000))
    assert seen[0].status == 409 and seen[0].code == "in_progress", seen[0]
    assert r.outcome == "succeeded" and r.recorded
    types = event_types(service, rid)
    assert "late_completion" not in types and types[-1] == "completed"


def test_result_over_the_bound_is_not_kept_and_a_rerun_is_told_so(service):
    rid, cid = key()
    big = {"text": "x" * 100}

    async def main():
        led = agent(service, max_result_bytes=64)
        first = await led.tool_call(rid, cid, Tool(big))
        with pytest.raises(ResultNotKept) as e:
            await led.tool_call(rid, cid, must_not_run)
        return first, e.value

    first, e = run(main())
    assert first.executed and first.recorded and first.result_kept is False
    assert first.result == big
    assert e.outcome == "succeeded" and e.result_bytes == len(first.result_json.encode())


# --- races ------------------------------------------------------------------


def test_fifty_coroutines_on_one_key_run_the_tool_once_and_all_get_its_result(service):
    rid, cid = key()
    tool = Tool({"sent": "once"}, delay_s=0.3)

    async def main():
        async with agent(service) as led:
            return await asyncio.gather(*(
                led.tool_call(rid, cid, tool, tool="send_email", args={"to": "ana"}, wait_s=10)
                for _ in range(50)))

    results = run(main())
    assert tool.calls == [("%s:%s" % (rid, cid), 1)]
    assert sum(r.executed for r in results) == 1
    assert sum(r.replayed for r in results) == 49
    assert {r.result_json for r in results} == {'{"sent":"once"}'}
    assert event_types(service, rid).count("claimed") == 1


def test_fifty_coroutines_without_waiting_run_once_the_rest_wait_or_replay(service):
    rid, cid = key()
    tool = Tool({"sent": "once"}, delay_s=0.2)

    async def main():
        led = agent(service)
        try:
            return await asyncio.gather(*(led.tool_call(rid, cid, tool, wait_s=0)
                                          for _ in range(50)), return_exceptions=True)
        finally:
            await led.aclose()

    outcomes = run(main())
    executed = [o for o in outcomes if isinstance(o, ToolCallResult) and o.executed]
    replayed = [o for o in outcomes if isinstance(o, ToolCallResult) and o.replayed]
    waiting = [o for o in outcomes if isinstance(o, InProgress)]
    assert len(tool.calls) == 1 and len(executed) == 1
    assert len(executed) + len(replayed) + len(waiting) == 50, [
        o for o in outcomes if not isinstance(o, (ToolCallResult, InProgress))]
    assert waiting, "the holder's 0.2 s should have been seen by some coroutine"
    assert all(r.result == {"sent": "once"} for r in replayed)


def test_fifty_keys_at_once_each_run_once_over_the_shared_pool(service):
    rid = new_id("r")
    tools = [Tool(k) for k in range(50)]

    async def main():
        async with AsyncLedger(url(service), service.token("agent"),
                               max_idle_connections=4) as led:
            first = await asyncio.gather(*(led.tool_call(rid, stable_tool_call_id(k), tools[k])
                                           for k in range(50)))
            again = await asyncio.gather(*(led.tool_call(rid, stable_tool_call_id(k),
                                                         must_not_run) for k in range(50)))
            return first, again

    first, again = run(main())
    assert [t.calls for t in tools] == [[("%s:call_%02d" % (rid, k), 1)] for k in range(50)]
    assert [r.result for r in first] == list(range(50)) and all(r.executed for r in first)
    assert [r.result for r in again] == list(range(50)) and all(r.replayed for r in again)


# --- the decorator ------------------------------------------------------------


def test_decorator_of_an_async_tool_claims_with_kwargs_and_passes_the_claim(service):
    led = agent(service)
    sent = []

    @led.idempotent(tool="send_email")
    async def send_email(to, subject, *, idempotency_key, fencing_token):
        await asyncio.sleep(0)
        sent.append((to, subject, idempotency_key, fencing_token))
        return {"message_id": "m-%d" % len(sent)}

    @led.idempotent()
    async def lookup(q):
        return {"q": q}

    rid = new_id("r")

    async def main():
        r = await send_email(request_id=rid, tool_call_id="call_00", to="ana@example.com",
                             subject="Hi")
        again = await send_email(request_id=rid, tool_call_id="call_00", subject="Hi",
                                 to="ana@example.com")
        with pytest.raises(ArgsMismatch):
            await send_email(request_id=rid, tool_call_id="call_00", to="bob@example.com",
                             subject="Hi")
        other = await lookup(request_id=rid, tool_call_id="call_01", q="weather")
        return r, again, other, await led.get_tool_call(rid, "call_00")

    r, again, other, view = run(main())
    assert sent == [("ana@example.com", "Hi", "%s:call_00" % rid, 1)]
    assert r.executed and r.result == {"message_id": "m-1"}
    assert again.replayed and again.result == {"message_id": "m-1"}
    assert other.result == {"q": "weather"}
    assert view["tool"] == "send_email"
    assert view["args_sha256"] == args_sha256({"to": "ana@example.com", "subject": "Hi"})
    assert send_email.__name__ == "send_email"
    with pytest.raises(TypeError):
        led.idempotent()(lambda q: q)


# --- the router ---------------------------------------------------------------


def test_failover_from_a_dead_replica_to_a_terminated_stream(service):
    led = router(service)
    rid = new_id("r")

    async def main():
        a1 = await led.begin_attempt(rid, new_id("a"), replica="gpu-1", lease_ms=5000)
        assert isinstance(a1, AsyncAttempt)
        assert (a1.epoch, a1.attempt_number, a1.revoked) == (1, 1, False)
        first = await led.tool_call(rid, "call_00", Tool({"temp": 21}), tool="weather",
                                    args={"city": "Oslo"}, attempt=a1)
        assert first.executed
        a1.start_heartbeat(interval_s=0.1)
        assert a1.heartbeat_running
        a2_id = new_id("a")
        d = await led.failover(rid, a1, "replica_exited", retry_prefill_tokens=100,
                               next_attempt={"attempt_id": a2_id, "replica": "gpu-2",
                                             "lease_ms": 6000})
        assert d.action == "retry_prefill" and d.body["source_state"] == "dead"
        assert a1.revoked and not a1.heartbeat_running
        assert d.settled_tool_calls == [{"tool_call_id": "call_00", "tool": "weather",
                                         "args_sha256": args_sha256({"city": "Oslo"}),
                                         "outcome": "succeeded"}]
        a2 = d.attempt
        assert (a2.attempt_id, a2.epoch, a2.lease_ms) == (a2_id, 2, 6000)
        # The zombie may not publish, and is told so without asking ledgerd.
        with pytest.raises(AttemptFenced):
            await a1.deliver(1)
        again = await led.tool_call(rid, "call_00", must_not_run, tool="weather",
                                    args={"city": "Oslo"}, attempt=a2)
        assert again.replayed and again.result == {"temp": 21}
        delivered = await a2.deliver(1)
        assert delivered["first_delta_sent"] is True
        d = await led.failover(rid, a2.attempt_id, "upstream_closed",
                               next_attempt={"attempt_id": new_id("a")})
        assert d.action == "terminate_stream" and d.attempt is None
        assert d.client_error["error"]["code"] == "upstream_decode_interrupted"
        assert json.loads(d.sse_event[len("data: "):]) == d.client_error
        with pytest.raises(RequestClosed):
            await led.failover(rid, a2, "network_error")
        assert a2.revoked
        with pytest.raises(AttemptFenced) as e:
            await led.failover(rid, a1.attempt_id, "network_error")
        assert e.value.details["current_attempt_id"] == a2_id
        return (await led.get_request(rid))["request"]["status"]

    assert run(main()) == "terminated"


def test_begin_deliver_finish_closes_the_request(service):
    led = router(service)
    rid = new_id("r")

    async def main():
        a = await led.begin_attempt(rid, new_id("a"))
        await a.deliver(0)
        done = await a.finish("completed", delivered_output_tokens=120, reason="stop")
        return done, (await led.get_request(rid))["request"]

    done, view = run(main())
    assert done["state"] == "finished" and done["request"]["status"] == "completed"
    assert view["status"] == "completed" and view["delivered_output_tokens"] == 120


def test_uncertain_liveness_waits_for_the_fence_then_reruns(service):
    led = router(service)
    rid = new_id("r")

    async def main():
        a1 = await led.begin_attempt(rid, new_id("a"), lease_ms=1900)
        a2_id = new_id("a")
        d = await led.failover(rid, a1.attempt_id, "heartbeat_timeout",
                               next_attempt={"attempt_id": a2_id})
        assert d.action == "wait_for_fence" and 1000 < d.retry_after_ms <= 1900
        assert (await a1.cancel_ack())["state"] == "cancelled"
        d = await led.failover(rid, a1.attempt_id, "heartbeat_timeout",
                               next_attempt={"attempt_id": a2_id})
        assert d.action == "retry_prefill" and d.attempt.attempt_id == a2_id

    run(main())


def attempt_state(rid, aid, service, tenant):
    view = reviewer(service, tenant).get_request(rid)
    return {a["attempt_id"]: a["state"] for a in view["attempts"]}[aid]


def test_heartbeat_task_keeps_the_attempt_alive_then_it_expires(service):
    tenant = new_id("t")
    led = AsyncLedger(url(service), service.token("router", tenant))
    rid = new_id("r")

    async def main():
        a = await led.begin_attempt(rid, new_id("a"), lease_ms=800)
        a.start_heartbeat(interval_s=0.15)
        try:
            await asyncio.sleep(2)  # well past the lease
            alive = await asyncio.to_thread(attempt_state, rid, a.attempt_id, service, tenant)
        finally:
            await a.stop_heartbeat()
        await asyncio.sleep(1)
        expired = await asyncio.to_thread(attempt_state, rid, a.attempt_id, service, tenant)
        assert not a.revoked
        with pytest.raises(AttemptFenced):
            await a.renew()
        return alive, expired, a.revoked

    assert run(main()) == ("live", "expired", True)


def test_heartbeat_task_sets_revoked_when_the_attempt_is_cancelled(service):
    led = router(service)
    rid = new_id("r")

    async def main():
        a = await led.begin_attempt(rid, new_id("a"), lease_ms=3000)
        a.start_heartbeat(interval_s=0.1)
        try:
            # The same attempt cancelled elsewhere (another router, an operator).
            await (await led.begin_attempt(rid, a.attempt_id, lease_ms=3000)).cancel("operator")
            deadline = time.monotonic() + 3
            while not a.revoked and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return a.revoked, a.heartbeat_running
        finally:
            await a.stop_heartbeat()

    assert run(main()) == (True, False)


def test_claim_under_a_fenced_attempt_raises_and_revokes(service):
    led = router(service)
    rid = new_id("r")

    async def main():
        a1 = await led.begin_attempt(rid, new_id("a"))
        await (await led.begin_attempt(rid, a1.attempt_id)).cancel("zombie")
        assert not a1.revoked
        with pytest.raises(AttemptFenced) as e:
            await led.tool_call(rid, "call_00", must_not_run, attempt=a1)
        assert e.value.status == 409
        return a1.revoked

    assert run(main()) is True


def test_a_ledger_error_is_the_blocking_clients(service):
    # The same classes: code that handles the blocking client's errors handles these.
    with pytest.raises(LedgerError) as e:
        run(agent(service).get_tool_call(new_id("r"), "call_00"))
    assert e.value.status == 404
