"""RFC 8785 JSON Canonicalization Scheme (JCS) and the argument fingerprint.

ledgerd recognises "the same tool call" by the SHA-256 of its arguments in
canonical form, so every client must produce the same bytes for the same
JSON value, whatever key order, spacing or number spelling it started from:

- objects: members sorted by their keys' UTF-16 code units, no whitespace;
- strings: UTF-8, escaping only ``"``, ``\\`` and control characters below
  U+0020 (``\\b \\t \\n \\f \\r`` in short form, the rest as ``\\u00xx``);
- numbers: IEEE-754 doubles written as ECMAScript's
  ``Number.prototype.toString`` writes them (shortest round-trip digits,
  plain notation for 1e-6 <= |x| < 1e21, ``-0`` as ``0``). NaN and the
  infinities have no JSON form and are refused.

Python integers are JSON numbers too, hence doubles: ``1`` and ``1.0``
canonicalise alike, and an integer beyond the double range is refused.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, NoReturn

__all__ = ["args_sha256", "canonicalize", "canonicalize_text", "format_number"]

# The short escapes JSON has; every other control character is \u00xx.
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                  "\f": "\\f", "\r": "\\r"}
_ESCAPES = {chr(c): _SHORT_ESCAPES.get(chr(c), "\\u%04x" % c) for c in range(0x20)}
_ESCAPES.update(_SHORT_ESCAPES)
_ESCAPE_TABLE = str.maketrans(_ESCAPES)


def format_number(value: float) -> str:
    """Writes a finite double the way ECMAScript's Number.prototype.toString does.

    ``repr()`` already yields the shortest digits that read back as the same
    double (the digits ECMAScript asks for); only their layout differs.

    Raises:
        ValueError: for NaN and the infinities, which JSON cannot express.
    """
    if not math.isfinite(value):
        raise ValueError("JCS has no form for %r" % value)
    if value == 0:
        return "0"  # -0 as well
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    # The value is 0.DIGITS x 10^point; strip zeros off both ends of DIGITS.
    point = len(whole) + int(exponent or 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= point <= 21:
        return sign + digits + "0" * (point - k)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    e = point - 1
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return "%s%se%s%d" % (sign, head, "+" if e >= 0 else "-", abs(e))


def _utf16_order(key: str) -> bytes:
    # Big-endian UTF-16 bytes compare like the sequence of code units.
    return key.encode("utf-16-be", "surrogatepass")


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append('"' + value.translate(_ESCAPE_TABLE) + '"')
    elif isinstance(value, float):
        out.append(format_number(value))
    elif isinstance(value, int):
        try:
            out.append(format_number(float(value)))
        except OverflowError:
            raise ValueError("integer out of the double range: %d" % value) from None
    elif isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TypeError("JSON object keys must be str, not %s" % type(key).__name__)
        out.append("{")
        for i, key in enumerate(sorted(value, key=_utf16_order)):
            if i:
                out.append(",")
            _write(key, out)
            out.append(":")
            _write(value[key], out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError("%s is not a JSON value" % type(value).__name__)


def canonicalize(value: Any) -> bytes:
    """The RFC 8785 canonical form of a JSON value, as UTF-8 bytes.

    The value is made of dict (str keys), list, tuple, str, int, float, bool
    and None.

    Raises:
        ValueError: a number JSON cannot carry (NaN, infinities, an integer
            beyond the double range) or a string with a lone surrogate.
        TypeError: a value of another type, or a key that is not a str.
    """
    out: list[str] = []
    _write(value, out)
    try:
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError("a string has a lone surrogate: %s" % e) from None


def _duplicate_keys_refused(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError("duplicate key in a JSON object: %r" % key)
            seen.add(key)
    return obj


def _not_json(name: str) -> NoReturn:
    raise ValueError("%s is not JSON" % name)


def canonicalize_text(text: str | bytes) -> bytes:
    """The canonical form of a JSON text, exactly as ledgerd computes it.

    Every number is read from its decimal text straight to the nearest
    double (``float()`` rounds correctly), integers included, so a long
    integer rounds like it does on the server. Duplicate keys and the
    non-JSON constants NaN and Infinity are refused.

    Raises:
        ValueError: the text is not JSON (bytes that are not UTF-8
            included), or holds a value :func:`canonicalize` refuses.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    value = json.loads(text, parse_float=float, parse_int=float,
                       parse_constant=_not_json, object_pairs_hook=_duplicate_keys_refused)
    return canonicalize(value)


def args_sha256(value: Any) -> str:
    """The fingerprint ledgerd keeps of a tool call's arguments.

    SHA-256 of :func:`canonicalize` of the value, as 64 lowercase hex digits:
    the ``args_sha256`` a claim may send instead of ``args``.
    """
    return hashlib.sha256(canonicalize(value)).hexdigest()
