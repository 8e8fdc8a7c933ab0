"""RFC 8785 (JCS) canonical JSON with exact numbers, and the argument fingerprint.

ledgerd recognises "the same tool call" by the SHA-256 of its arguments in
canonical form, so every client must produce the same bytes for the same
JSON value, whatever key order, spacing or number spelling it started from:

- objects: members sorted by their keys' UTF-16 code units, no whitespace;
- strings: UTF-8, escaping only ``"``, ``\\`` and control characters below
  U+0020 (``\\b \\t \\n \\f \\r`` in short form, the rest as ``\\u00xx``);
- numbers: laid out as ECMAScript's ``Number.prototype.toString`` lays out
  a double (plain digits while at most 21 come before the point and the
  value is at least 1e-6, exponent form otherwise, ``-0`` as ``0``), but
  with the number's own exact significant digits. Where JCS's text of the
  nearest double has exactly the number's value (``0.1``, ``1e23``, ``1.0``)
  these are the same bytes; where it has not (``9007199254740993``,
  ``0.10000000000000001``) JCS would have made two different calls share a
  fingerprint. A number beyond the double range (``1e400``) is refused; one
  below the smallest double (``1e-400``) keeps its digits. NaN and the
  infinities have no JSON form and are refused.

Python values map to numbers exactly: an ``int`` by its digits, a ``float``
by its ``repr()`` (the shortest digits that read back as it, which is what
JCS writes and what ``json.dumps`` sends), a :class:`decimal.Decimal` by
its own digits (``Decimal("1.10")`` is ``1.1``).
"""

from __future__ import annotations

import decimal
import hashlib
import json
import math
import re
from typing import Any, NoReturn

__all__ = ["args_sha256", "canonicalize", "canonicalize_text", "format_number"]

# The short escapes JSON has; every other control character is \u00xx.
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                  "\f": "\\f", "\r": "\\r"}
_ESCAPES = {chr(c): _SHORT_ESCAPES.get(chr(c), "\\u%04x" % c) for c in range(0x20)}
_ESCAPES.update(_SHORT_ESCAPES)
_ESCAPE_TABLE = str.maketrans(_ESCAPES)

# A JSON number's text: sign, integer digits, fraction digits, exponent.
_NUMBER_RE = re.compile(r"(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?)([0-9]+))?\Z")
# An exponent of more digits than this is read as text, not as an int
# (ledger/common/json_number.c draws the same line, for int64_t).
_EXP_DIGITS = 18
_TAIL = 10 ** _EXP_DIGITS
# Every double is below 10^309: a value of point >= 310 is beyond the
# range, one of point 309 needs its nearest double to be told.
_POINT_MAX = 309


class _NumberText:
    """A number of a JSON text, kept as its text (json.loads' parse_int and parse_float)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _layout(negative: bool, digits: str, point: int | None, tiny_exp: str = "") -> str:
    """ECMAScript's Number::toString layout of -?0.DIGITS x 10^point.

    ``digits`` has no leading or trailing zero. ``tiny_exp``, when given,
    stands for a point too far below zero for an int read from text: the
    exponent ``point - 1`` is then minus those digits.
    """
    sign = "-" if negative else ""
    k = len(digits)
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    if tiny_exp:
        return "%s%se-%s" % (sign, head, tiny_exp)
    assert point is not None
    if k <= point <= 21:
        return sign + digits + "0" * (point - k)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    e = point - 1
    return "%s%se%s%d" % (sign, head, "+" if e >= 0 else "-", abs(e))


def _out_of_range(what: str) -> NoReturn:
    raise ValueError("a number beyond the double range has no canonical form: %s" % what)


def _check_range(digits: str, point: int, what: str) -> None:
    """Refuses 0.DIGITS x 10^point if its nearest double is infinite."""
    if point > _POINT_MAX or (point == _POINT_MAX and
                              math.isinf(float("0.%se%d" % (digits, point)))):
        _out_of_range(what)


def _plus_one(head: str) -> str:
    kept = head.rstrip("9")
    if not kept:
        return "1" + "0" * len(head)
    return kept[:-1] + chr(ord(kept[-1]) + 1) + "0" * (len(head) - len(kept))


def _minus_one(head: str) -> str:
    kept = head.rstrip("0")  # never empty: head has a leading nonzero digit
    return (kept[:-1] + chr(ord(kept[-1]) - 1) + "9" * (len(head) - len(kept))).lstrip("0")


def _minus_small(m: str, c: int) -> str:
    """The digits of int(m) - c, for m of more than _EXP_DIGITS digits and |c| < 10^18.

    Python refuses str <-> int conversions past 4300 digits, and an
    exponent's text may be longer: only the last 18 digits are counted.
    """
    head, tail = m[:-_EXP_DIGITS], int(m[-_EXP_DIGITS:]) - c
    if tail < 0:
        head, tail = _minus_one(head), tail + _TAIL
    elif tail >= _TAIL:
        head, tail = _plus_one(head), tail - _TAIL
    return head + "%018d" % tail if head else str(tail)


def _format_text(text: str) -> str:
    """The canonical form of a JSON number's text, from its exact digits."""
    m = _NUMBER_RE.match(text)
    if m is None:
        raise ValueError("not a JSON number: %r" % text[:40])
    sign, whole, fraction, exp_sign, exp = m.groups()
    mantissa = whole + (fraction or "")
    stripped = mantissa.lstrip("0")
    if not stripped:
        return "0"  # -0 as well, whatever the exponent
    # The value is 0.DIGITS x 10^(shift + exponent).
    shift = len(whole) - (len(mantissa) - len(stripped))
    digits = stripped.rstrip("0")
    exp = (exp or "0").lstrip("0") or "0"
    if len(exp) > _EXP_DIGITS:
        if exp_sign != "-":
            _out_of_range(text[:40])
        # Far below the smallest double, and below any int64 exponent.
        return _layout(sign == "-", digits, None, _minus_small(exp, shift - 1))
    point = shift + (-int(exp) if exp_sign == "-" else int(exp))
    _check_range(digits, point, text[:40])
    return _layout(sign == "-", digits, point)


def _format_int(value: int) -> str:
    try:
        float(value)  # rounds to nearest, like the server: OverflowError past the range
    except OverflowError:
        _out_of_range("an int of %d bits" % value.bit_length())
    if value == 0:
        return "0"
    text = str(abs(value))
    digits = text.rstrip("0")
    return _layout(value < 0, digits, len(text))


def _format_decimal(value: decimal.Decimal) -> str:
    if not value.is_finite():
        raise ValueError("JCS has no form for %r" % value)
    sign, coefficient, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    stripped = "".join(map(str, coefficient)).lstrip("0")
    if not stripped:
        return "0"
    digits = stripped.rstrip("0")
    point = len(stripped) + exponent
    _check_range(digits, point, str(value)[:40])
    return _layout(sign == 1, digits, point)


def format_number(value: float) -> str:
    """Writes a finite double the way ECMAScript's Number.prototype.toString does.

    ``repr()`` already yields the shortest digits that read back as the same
    double (the digits ECMAScript asks for); only their layout differs. The
    text has exactly the digits ``repr()`` (and so ``json.dumps``) sends,
    so it is also the canonical form of what is sent.

    Raises:
        ValueError: for NaN and the infinities, which JSON cannot express.
    """
    if not math.isfinite(value):
        raise ValueError("JCS has no form for %r" % value)
    return _format_text(repr(value))


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
        out.append(_format_int(value))
    elif isinstance(value, decimal.Decimal):
        out.append(_format_decimal(value))
    elif isinstance(value, _NumberText):
        out.append(_format_text(value.text))
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

    The value is made of dict (str keys), list, tuple, str, int, float,
    decimal.Decimal, bool and None.

    Raises:
        ValueError: a number JSON cannot carry (NaN, infinities, a number
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

    Every number keeps the exact digits of its text (``1.10`` is ``1.1``,
    ``9007199254740993`` stays itself), as on the server; one beyond the
    double range is refused. Duplicate keys and the non-JSON constants NaN
    and Infinity are refused.

    Raises:
        ValueError: the text is not JSON (bytes that are not UTF-8
            included), or holds a value :func:`canonicalize` refuses.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    value = json.loads(text, parse_float=_NumberText, parse_int=_NumberText,
                       parse_constant=_not_json, object_pairs_hook=_duplicate_keys_refused)
    return canonicalize(value)


def args_sha256(value: Any) -> str:
    """The fingerprint ledgerd keeps of a tool call's arguments.

    SHA-256 of :func:`canonicalize` of the value, as 64 lowercase hex digits:
    the ``args_sha256`` a claim may send instead of ``args``.
    """
    return hashlib.sha256(canonicalize(value)).hexdigest()
