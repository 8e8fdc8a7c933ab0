"""W3C trace context (``traceparent``, ``tracestate``) on the calls to ledgerd.

ledgerd makes its span of each call a child of the traceparent it
receives. The client sends the one it is given (per call or per client),
else, when OpenTelemetry is importable, whatever its global propagator
injects for the current context. OpenTelemetry is optional and never a
dependency: when it cannot be imported this is a no-op. The client makes
no spans of its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# version-trace id-parent id-flags, lower-case hex only (W3C Trace Context).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# One header value: printable ASCII, never a line break that would start another header.
_VALUE = re.compile(r"[\x20-\x7e]{1,512}")
_NAME = re.compile(r"[a-z0-9!#$%&'*+.^_`|~-]{1,64}")
# The transport's own headers: a propagator does not get to write them.
_OWN = frozenset({"authorization", "accept", "content-type", "content-length", "user-agent",
                  "host", "connection", "transfer-encoding"})

_UNSET: Any = object()
_propagate: Any = _UNSET  # opentelemetry.propagate, None when it cannot be imported


def explicit_headers(traceparent: str | None, tracestate: str | None) -> dict[str, str] | None:
    """The headers of a trace context given by hand, or None when ``traceparent``
    is absent or malformed (bad syntax, version ``ff``, an all-zero trace or
    parent id): a context ledgerd would discard is not sent. ``tracestate``
    goes only with a well-formed traceparent, and only if it is one header value."""
    if not isinstance(traceparent, str):
        return None
    m = _TRACEPARENT.fullmatch(traceparent)
    if m is None or m.group(1) == "ff" or not m.group(2).strip("0") or not m.group(3).strip("0"):
        return None
    headers = {"traceparent": traceparent}
    if isinstance(tracestate, str) and tracestate.strip() and _VALUE.fullmatch(tracestate):
        headers["tracestate"] = tracestate
    return headers


def _propagator() -> Any:
    """``opentelemetry.propagate`` if it can be imported, else None; tried once."""
    global _propagate
    if _propagate is _UNSET:
        try:
            from opentelemetry import propagate  # type: ignore[import-not-found]
        except Exception:  # ImportError, or an installation too broken to use
            propagate = None
        _propagate = propagate
    return _propagate


def injected() -> dict[str, str]:
    """What OpenTelemetry's global propagator writes for the current context
    (its contextvars: the calling thread's, or the running task's), kept to
    well-formed header lines that are not the transport's own; {} without it."""
    propagate = _propagator()
    if propagate is None:
        return {}
    carrier: dict[str, str] = {}
    try:
        propagate.inject(carrier)
    except Exception:  # a propagator's bug must not fail the call it describes
        return {}
    return _clean(carrier)


def _clean(carrier: Mapping[Any, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in carrier.items():
        if not isinstance(name, str) or not isinstance(value, str):
            continue
        name = name.lower()
        if name not in _OWN and _NAME.fullmatch(name) and _VALUE.fullmatch(value):
            out[name] = value
    return out


def trace_headers(*given: tuple[str | None, str | None]) -> dict[str, str]:
    """The trace headers of one call: the first well-formed (traceparent,
    tracestate) pair of ``given`` (a call's own, then its client's), else
    OpenTelemetry's for the current context, else none.

    Taken in the caller's thread or task, once per call: a tool call's
    renewals run on a thread or task of their own, whose context is not the
    caller's, and carry the headers its claim carried."""
    for traceparent, tracestate in given:
        headers = explicit_headers(traceparent, tracestate)
        if headers is not None:
            return headers
    return injected()
