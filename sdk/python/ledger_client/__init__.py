"""Python client of ledgerd: exactly-once side effects for LLM agents.

An agent runtime wraps each tool call::

    from ledger_client import Ledger, stable_tool_call_id

    ledger = Ledger("http://127.0.0.1:8080", token)
    outcome = ledger.tool_call(request_id, stable_tool_call_id(0),
                               lambda key, token: mailer.send(..., idempotency_key=key),
                               tool="send_email", args={"to": "ana@example.com"})

A rerun of the request (on another replica, after a failover) gets the
recorded result back instead of sending a second email. A router ties its
attempts to the logical request with :meth:`Ledger.begin_attempt` and asks
:meth:`Ledger.failover` what it may do when a replica fails.

An asyncio agent uses :class:`ledger_client.aio.AsyncLedger`, the same
surface as coroutines (imported from its module, so that the blocking
client does not load asyncio).

Standard library only; every public name of the blocking client is exported here.
"""

from ._version import __version__
from .client import Ledger
from .errors import (
    ArgsMismatch,
    AttemptFenced,
    InProgress,
    LedgerError,
    LedgerUnavailable,
    NotExecuted,
    OutcomeUnknown,
    RequestClosed,
    ResultExpired,
    ResultNotKept,
    Retryable,
    TLSVerificationFailed,
)
from .jcs import args_sha256, canonicalize, canonicalize_text
from .router import Attempt, FailoverDecision
from .toolcall import ToolCallCounter, ToolCallResult, stable_tool_call_id

__all__ = [
    "ArgsMismatch",
    "Attempt",
    "AttemptFenced",
    "FailoverDecision",
    "InProgress",
    "Ledger",
    "LedgerError",
    "LedgerUnavailable",
    "NotExecuted",
    "OutcomeUnknown",
    "RequestClosed",
    "ResultExpired",
    "ResultNotKept",
    "Retryable",
    "TLSVerificationFailed",
    "ToolCallCounter",
    "ToolCallResult",
    "__version__",
    "args_sha256",
    "canonicalize",
    "canonicalize_text",
    "stable_tool_call_id",
]
