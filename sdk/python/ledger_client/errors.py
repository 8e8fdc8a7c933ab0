"""Exceptions: those ledgerd's answers turn into, and those tools raise.

Every refusal of ledgerd arrives as one envelope,
``{"error": {"code": ..., "message": ..., ...details}}``; it becomes a
:class:`LedgerError`, or the subclass for the codes a caller branches on.
The envelope is kept whole in ``.body``.

:class:`Retryable` and :class:`NotExecuted` go the other way: a tool
function raises them to tell the client what its failure means for the
idempotency key.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ArgsMismatch",
    "AttemptFenced",
    "InProgress",
    "LedgerError",
    "LedgerUnavailable",
    "NotExecuted",
    "OutcomeUnknown",
    "RequestClosed",
    "ResultExpired",
    "ResultNotKept",
    "Retryable",
    "TLSVerificationFailed",
    "error_from_answer",
]


class LedgerError(Exception):
    """ledgerd refused a call, or could not be reached.

    Attributes:
        status: the HTTP status, or None when no answer came at all.
        body: the error envelope, ``{"error": {"code", "message", ...}}``.
    """

    def __init__(self, status: int | None, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body
        super().__init__("%s: %s" % (self.code, self.message))

    @property
    def details(self) -> dict[str, Any]:
        """The ``error`` object of the envelope: code, message and details."""
        error = self.body.get("error")
        return error if isinstance(error, dict) else {}

    @property
    def code(self) -> str:
        """The machine-readable error code, e.g. ``"attempt_required"``."""
        return str(self.details.get("code", "unknown_error"))

    @property
    def message(self) -> str:
        """The human-readable explanation ledgerd gave."""
        return str(self.details.get("message", ""))

    @property
    def retry_after_ms(self) -> int | None:
        """How long to wait before asking again, when the answer says so."""
        value = self.details.get("retry_after_ms")
        return value if isinstance(value, int) else None


class InProgress(LedgerError):
    """``409 in_progress``: another holder's lease on the key is running.

    ``retry_after_ms`` is the lease it has left; ``details["holder"]``
    names its attempt and owner.
    """


class OutcomeUnknown(LedgerError):
    """``409 outcome_unknown``: a holder's lease ran out with no completion.

    The side effect may or may not have happened. Nothing but an operator's
    ``resolve`` (after checking the tool's own records) moves the key on.
    """


class AttemptFenced(LedgerError):
    """``409 attempt_fenced``: the attempt has no rights any more.

    A zombie replica must neither start a side effect nor publish to the
    client. From a failover, ``details["current_attempt_id"]`` names the
    newest attempt.
    """


class ArgsMismatch(LedgerError):
    """``422 args_mismatch``: the key was first claimed for another call.

    Another ``args``, ``tool`` or ``tool_dedupes`` (``details["field"]``
    says which). Under a live attempt the rerun diverged: ledgerd revoked
    the attempt and failed the request.
    """


class ResultExpired(LedgerError):
    """``410 result_expired``: settled long ago, its result removed by retention.

    The call must not run again; ``details`` keeps its ``outcome`` and
    ``completed_at``.
    """


class ResultNotKept(LedgerError):
    """``409 result_not_kept``: the call finished, and its result was too large to keep.

    ledgerd kept only the length and SHA-256 of the result's JSON text, so
    it cannot be replayed; the call must not run again either. Nothing
    but the caller's own copy (the run that executed it) has the result.
    """

    @property
    def outcome(self) -> str | None:
        """How the call ended: ``"succeeded"`` or ``"failed"``."""
        value = self.details.get("outcome")
        return value if isinstance(value, str) else None

    @property
    def result_bytes(self) -> int | None:
        """The length in bytes of the result's exact JSON text."""
        value = self.details.get("result_bytes")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def result_sha256(self) -> str | None:
        """The SHA-256 of that text, 64 lowercase hex digits."""
        value = self.details.get("result_sha256")
        return value if isinstance(value, str) else None


class RequestClosed(LedgerError):
    """The logical request is over for the router: no new attempt, ever.

    ``409 request_closed`` (it completed, failed or was terminated) or, when
    creating an attempt, ``409 first_delta_sent``.
    """

    @property
    def client_error(self) -> dict[str, Any] | None:
        """The error the router sends its client, if the request recorded one."""
        value = self.details.get("client_error")
        return value if isinstance(value, dict) else None


class LedgerUnavailable(LedgerError):
    """ledgerd did not answer, or answered ``503``, for as long as the call may retry.

    After a ``503`` the body is ledgerd's (``store_unavailable``); when no
    answer came at all, ``status`` is None and the code ``unreachable``.
    """


class TLSVerificationFailed(LedgerUnavailable):
    """ledgerd's certificate failed verification: ledgerd was not asked.

    Signed by a CA that ``ca_file`` (or the system's store) does not hold,
    issued for another host name, or expired. Raised at once, never
    retried, since asking again would fail the same way until a person
    fixes the CA file or the certificate. A :class:`LedgerUnavailable`, so
    code that handles an unreachable ledgerd (a tool not run, an outcome
    not recorded) handles it too; ``status`` is None and the code
    ``tls_verification_failed``.
    """


_BY_CODE: dict[str, type[LedgerError]] = {
    "in_progress": InProgress,
    "outcome_unknown": OutcomeUnknown,
    "attempt_fenced": AttemptFenced,
    "args_mismatch": ArgsMismatch,
    "result_expired": ResultExpired,
    "result_not_kept": ResultNotKept,
    "request_closed": RequestClosed,
    "first_delta_sent": RequestClosed,
}


def error_from_answer(status: int | None, body: dict[str, Any]) -> LedgerError:
    """The exception for an error answer: the subclass its code calls for."""
    error = body.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return _BY_CODE.get(str(code), LedgerError)(status, body)


class Retryable(Exception):
    """Raised by a tool: it failed, and running it again is safe.

    The client records a retryable failure, which makes the key claimable
    again (the failure stays in the history), then lets the exception go on.
    Raise it only when the side effect certainly did not happen, or when the
    tool itself deduplicates by the idempotency key.
    """


class NotExecuted(Exception):
    """Raised by a tool: it decided not to act, and the side effect did not happen.

    The client releases the key (the exception's text is the reason kept in
    the history), then lets the exception go on.
    """
