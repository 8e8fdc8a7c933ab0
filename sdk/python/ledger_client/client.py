"""The client object: one ledgerd, one token, every call an SDK user makes."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from typing import Any

from . import router
from ._http import Transport, quote_id
from .errors import ArgsMismatch, AttemptFenced
from .router import Attempt, FailoverDecision
from .toolcall import (MAX_RESULT_BYTES, ToolCall, ToolCallResult, ToolFunction,
                       check_max_result_bytes)

__all__ = ["Ledger"]

# Keyword arguments the decorated function may declare to receive the claim.
_CLAIM_PARAMETERS = ("idempotency_key", "fencing_token")


class Ledger:
    """A client of one ledgerd with one token; safe to share between threads.

    Args:
        url: ledgerd's base URL, e.g. ``http://127.0.0.1:8080``.
        token: a bearer token; its role decides which calls are allowed
            (``agent`` for tool calls, ``router`` for attempts and failover).
        timeout_s: how long one HTTP exchange may take before it counts as lost.
        retry_s: how long a call is retried (the same bytes again) while
            ledgerd does not answer or answers ``503``, before
            :class:`LedgerUnavailable` is raised.
        complete_retry_s: the same for recording a tool's outcome. It is
            longer because the side effect already happened: losing its
            record would leave the key ``outcome_unknown``.
        ca_file: for an ``https`` URL, the PEM file of the CAs that may sign
            ledgerd's certificate, and only those; None: the system's trust
            store. The certificate and its host name are always verified;
            one that fails raises :class:`TLSVerificationFailed`.
        max_result_bytes: the largest result, in bytes of its JSON text,
            that a completion sends whole (default 1 MiB, ledgerd's default
            ``--max-result-bytes``). A longer one is recorded as the text's
            length and SHA-256 only, and so is one ledgerd refuses as too
            large a body: the completion is never lost to its size, and a
            rerun of the key raises :class:`ResultNotKept`.
        traceparent, tracestate: a W3C trace context for every call of this
            client, for a caller without OpenTelemetry (a call's own wins).
            A malformed traceparent is not sent; without one, the calls
            carry OpenTelemetry's current context when ``opentelemetry``
            can be imported, else no trace context.

    Raises:
        ValueError: a URL that is not http(s), a ``ca_file`` that cannot
            be read or holds no PEM certificate (checked for an ``http``
            URL too), or a ``max_result_bytes`` that is not an int >= 0.
    """

    def __init__(self, url: str, token: str, *, timeout_s: float = 10.0,
                 retry_s: float = 30.0, complete_retry_s: float = 300.0,
                 ca_file: str | os.PathLike[str] | None = None,
                 max_result_bytes: int = MAX_RESULT_BYTES,
                 traceparent: str | None = None, tracestate: str | None = None) -> None:
        self.url = url
        self.retry_s = retry_s
        self.complete_retry_s = complete_retry_s
        self.max_result_bytes = check_max_result_bytes(max_result_bytes)
        self._transport = Transport(url, token, timeout_s=timeout_s, ca_file=ca_file,
                                    traceparent=traceparent, tracestate=tracestate)

    def __repr__(self) -> str:
        return "<Ledger %s>" % self.url

    # --- tool calls ---------------------------------------------------------

    def tool_call(self, request_id: str, tool_call_id: str, fn: ToolFunction, *,
                  args: Any = None, tool: str | None = None, attempt_id: str | None = None,
                  attempt: Attempt | None = None, owner: str | None = None,
                  lease_ms: int | None = None, tool_dedupes: bool = False,
                  store_args: bool = False, wait_s: float = 0,
                  max_result_bytes: int | None = None, traceparent: str | None = None,
                  tracestate: str | None = None) -> ToolCallResult:
        """Runs ``fn(idempotency_key, fencing_token)`` at most once for this key.

        The key is ``"{request_id}:{tool_call_id}"``. Each invocation claims
        it with a fresh random ``claim_id`` (re-sent only when a claim whose
        answer was lost is retried, so a lost answer never strands the key).

        - Already finished: returns the recorded result without calling
          ``fn`` (``replayed=True``, ``outcome`` ``"succeeded"`` or ``"failed"``).
        - Claimed: calls ``fn``, renewing the claim every third of its lease
          while it runs, then records the outcome:

          * ``fn`` returns a JSON value: recorded as ``succeeded`` and
            returned (``executed=True``). A result too large to keep (over
            ``max_result_bytes``, or refused as too large a body) is
            recorded as its length and SHA-256 (``result_kept=False``).
            If ledgerd cannot be reached to
            record it within ``complete_retry_s``, the result is returned
            all the same with ``outcome="unrecorded"``, ``recorded=False``.
          * ``fn`` raises :class:`Retryable`: recorded as a retryable
            failure, which makes the key claimable again; the exception
            propagates.
          * ``fn`` raises :class:`NotExecuted`: the key is released (its
            text is the reason); the exception propagates.
          * ``fn`` raises any other exception, or returns something JSON
            cannot carry: recorded as the final outcome ``failed``, with
            ``{"error": <type name>, "message": <str(e)>}`` as its result,
            replayed to every later invocation; the exception propagates.
            If the failure cannot be recorded, a note on the exception says so.
          * ``fn`` is interrupted (KeyboardInterrupt, SystemExit): nothing
            is recorded, since the effect may be half done; once the lease
            runs out the key is ``outcome_unknown``.

        - Held by someone else: claims again, polling with a jittered
          back-off of at most 1 s and never past the holder's lease, for up
          to ``wait_s`` seconds; a completion met meanwhile is replayed.

        Args:
            args: the call's arguments (any JSON value, ``decimal.Decimal``
                numbers included; None: none). Their fingerprint
                (:func:`args_sha256`) is sent; a later claim of the key with
                other arguments is :class:`ArgsMismatch`.
            tool: the tool's name, recorded and compared like ``args``.
            attempt_id, attempt: the router attempt the call is made under
                (required once the request has attempts). With ``attempt``,
                the object is marked ``revoked`` when ledgerd fences it or
                revokes it for a diverging rerun (:class:`ArgsMismatch`).
            owner: who executes, for incident review (``billing-agent@pod-7``).
            lease_ms: how long the claim holds between renewals (ledgerd's
                default: 30 s); past it without a word the outcome is unknown.
            tool_dedupes: the tool itself honours the idempotency key, so
                it may run again after an unknown outcome.
            store_args: also send ``args`` themselves (their canonical
                text), kept for incident review.
            wait_s: how long to wait for another holder.
            max_result_bytes: this call's bound of a result sent whole
                (None: the client's).
            traceparent, tracestate: the W3C trace context this call's
                requests to ledgerd carry (claim, renewals, completion),
                in place of the client's or OpenTelemetry's current one; a
                malformed traceparent is not sent.

        Raises:
            InProgress: another holder still has the key after ``wait_s``.
            OutcomeUnknown: a holder vanished mid-call; an operator must
                resolve the key first.
            ArgsMismatch: the key was claimed for another call.
            AttemptFenced: the attempt has no rights: start nothing.
            ResultExpired: settled long ago; it must not run again.
            ResultNotKept: finished, its result too large to have been
                kept: it must not run again, and cannot be replayed.
            LedgerUnavailable: no answer to the claim within ``retry_s``
                (``fn`` was not called).
            LedgerError: any other refusal (``attempt_required``, ...).
        """
        if attempt is not None:
            if attempt_id is not None and attempt_id != attempt.attempt_id:
                raise ValueError("attempt_id and attempt name different attempts")
            attempt_id = attempt.attempt_id
        call = ToolCall(self._transport, request_id, tool_call_id, args=args, tool=tool,
                        attempt_id=attempt_id, owner=owner, lease_ms=lease_ms,
                        tool_dedupes=tool_dedupes, store_args=store_args,
                        retry_s=self.retry_s, complete_retry_s=self.complete_retry_s,
                        max_result_bytes=(self.max_result_bytes if max_result_bytes is None
                                          else max_result_bytes),
                        traceparent=traceparent, tracestate=tracestate)
        try:
            return call.run(fn, wait_s)
        except (ArgsMismatch, AttemptFenced):
            if attempt is not None:
                attempt.revoked = True
            raise

    def idempotent(self, tool: str | None = None, *, owner: str | None = None,
                   lease_ms: int | None = None, tool_dedupes: bool = False,
                   store_args: bool = False, wait_s: float = 0,
                   max_result_bytes: int | None = None
                   ) -> Callable[[Callable[..., Any]], Callable[..., ToolCallResult]]:
        """Decorates a tool function so that each of its calls goes through :meth:`tool_call`.

        The decorated function takes keyword arguments only::

            @ledger.idempotent(tool="send_email")
            def send_email(to, subject, *, idempotency_key):
                return mailer.send(to, subject, idempotency_key=idempotency_key)

            outcome = send_email(request_id=rid, tool_call_id="call_00",
                                 to="ana@example.com", subject="Your refund")

        ``request_id`` and ``tool_call_id`` name the key; ``attempt`` or
        ``attempt_id``, if given, the router attempt. All the other keyword
        arguments are the tool's arguments: they are the claim's ``args``
        and are passed on to the function, together with
        ``idempotency_key`` and ``fencing_token`` for each of those two
        names the function declares as a parameter. The call returns the
        :class:`ToolCallResult` (the function's own return value is its
        ``result``) and raises as :meth:`tool_call` does.

        Args:
            tool: the tool's name (default: the function's name).
            owner, lease_ms, tool_dedupes, store_args, wait_s,
                max_result_bytes: as for :meth:`tool_call`, for every call
                of the function.
        """

        def decorate(func: Callable[..., Any]) -> Callable[..., ToolCallResult]:
            name = tool or func.__name__
            parameters = inspect.signature(func).parameters
            wanted = [p for p in _CLAIM_PARAMETERS if p in parameters
                      and parameters[p].kind != inspect.Parameter.POSITIONAL_ONLY]

            @functools.wraps(func)
            def wrapper(*, request_id: str, tool_call_id: str, attempt: Attempt | None = None,
                        attempt_id: str | None = None, **kwargs: Any) -> ToolCallResult:
                def run(idempotency_key: str, fencing_token: int) -> Any:
                    claim = {"idempotency_key": idempotency_key, "fencing_token": fencing_token}
                    return func(**kwargs, **{p: claim[p] for p in wanted})

                return self.tool_call(request_id, tool_call_id, run, args=kwargs, tool=name,
                                      attempt=attempt, attempt_id=attempt_id, owner=owner,
                                      lease_ms=lease_ms, tool_dedupes=tool_dedupes,
                                      store_args=store_args, wait_s=wait_s,
                                      max_result_bytes=max_result_bytes)

            return wrapper

        return decorate

    # --- the router's calls -------------------------------------------------

    def begin_attempt(self, request_id: str, attempt_id: str, *, replica: str | None = None,
                      model_revision: str | None = None, lease_ms: int | None = None,
                      max_attempts: int | None = None) -> Attempt:
        """Creates an attempt of the request (and the request, if new).

        Repeating the same call returns the same attempt. Refusals are
        :class:`RequestClosed` (``request_closed``, ``first_delta_sent``:
        no new attempt, ever; ``client_error`` says what to tell the
        client) and :class:`LedgerError` with ``source_not_fenced``,
        ``tool_call_in_progress`` (both with ``retry_after_ms``),
        ``tool_outcome_unknown``, ``retry_budget_exhausted``,
        ``revision_mismatch``, ``request_mismatch``.
        """
        return router.begin_attempt(self._transport, request_id, attempt_id, replica=replica,
                                    model_revision=model_revision, lease_ms=lease_ms,
                                    max_attempts=max_attempts, retry_s=self.retry_s)

    def failover(self, request_id: str, attempt: Attempt | str, signal: str, *,
                 retry_prefill_tokens: int | None = None,
                 next_attempt: dict[str, Any] | None = None) -> FailoverDecision:
        """Reports a failure of the live attempt; returns what the router may do.

        Args:
            attempt: the failed attempt: its :class:`Attempt` (of this
                request), or, as before, its id. The object is revoked
                (``revoked`` set, its heartbeat stopped) by every decision
                but ``keep_waiting``, and by :class:`AttemptFenced` and
                :class:`RequestClosed`. Given only the id, no object is
                touched: ledgerd still refuses the old attempt, but its
                object learns it only from a refusal of its own.
            signal: ``replica_exited``, ``pod_lost``, ``upstream_closed``
                (certainly dead), ``network_error``, ``heartbeat_timeout``
                (liveness uncertain), ``overloaded`` or ``client_disconnected``.
            retry_prefill_tokens: what a rerun would cost to prefill.
            next_attempt: the attempt to create if the answer is
                ``retry_prefill`` (``attempt_id``, and optionally ``replica``,
                ``model_revision``, ``lease_ms``); it comes back as
                ``decision.attempt``.

        Raises:
            AttemptFenced: the attempt is not the request's newest
                (``details["current_attempt_id"]``).
            RequestClosed: the request is over (``client_error``).
            ValueError: ``attempt`` is an attempt of another request.
        """
        return router.failover(self._transport, request_id, attempt, signal,
                               retry_prefill_tokens=retry_prefill_tokens,
                               next_attempt=next_attempt, retry_s=self.retry_s)

    # --- reading --------------------------------------------------------------

    def get_request(self, request_id: str) -> dict[str, Any]:
        """The request with its attempts, tool calls and history (``GET /v1/requests/{rid}``)."""
        return self._get("/v1/requests/%s" % quote_id(request_id))

    def get_tool_call(self, request_id: str, tool_call_id: str) -> dict[str, Any]:
        """One tool call: state, holder, fingerprint, outcome and result."""
        return self._get("/v1/requests/%s/tool-calls/%s" % (quote_id(request_id),
                                                            quote_id(tool_call_id)))

    def _get(self, path: str) -> dict[str, Any]:
        body: dict[str, Any] = self._transport.call("GET", path, retry_s=self.retry_s).body
        return body
