"""What the tests of keyed requests share: the pool's secret, the clocks, the
request id a key derives, and what the fault replicas and the tool service
recorded."""

import base64
import hashlib
import hmac
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))

from stack import Timing  # noqa: E402

SECRET = "a secret of the pool, 32 bytes.."
ENV = {"GATEWAY_KEY_SECRET": SECRET}
# A lease short enough that a dead gateway's attempt runs out within a test; a
# stall timeout long enough that a tool call before the first token is no failure.
TIMING = Timing(lease_ms=2000, soft_timeout_ms=500, stall_timeout_ms=8000)


def rid_of(key, scope=""):
    """The request id GATEWAY.md derives from a key in a scope."""
    s = scope.encode()
    mac = hmac.new(SECRET.encode(), struct.pack(">I", len(s)) + s + key.encode(),
                   hashlib.sha256).digest()
    return "k-" + base64.b32encode(mac).decode().lower().rstrip("=")[:32]


def executions(run_):
    """The tool's executions (a deduplicated repeat is no execution)."""
    return [e for e in run_.tool_log() if not e.get("deduped")]


def upstream_requests(run_, rid=None):
    return [e for r in run_.replicas for e in r.events(rid) if e["event"] == "request"]
