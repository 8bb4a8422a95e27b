"""How numbers and members are written, the same in every view: the terminal, the story's sentences,
the report, the figures' labels and the page (views/static/format.js writes numbers by the same
rules, and tests/browser/test_formats.py feeds both the same values).

The rules: a number is its value rounded to the digits shown, half away from zero (12.5% reads
"13%", as JavaScript's toFixed rounds); a value that rounds to zero is zero and reads "0.00", with
"+" where a sign is written, never "-0.00" (a minus there would claim a direction the digits
shown do not hold); the minus is "-", so that a number copied from any view reads as a number;
past 1e21 the shortest exponent form ("1e+21"); "nan", "inf" and "-inf" as such.
"""
from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Context, Decimal

#: From this magnitude on, a number is written in the shortest exponent form (as toFixed does).
EXPONENT_FROM = 1e21
_EXACT = Context(prec=200)  # enough digits for any float below EXPONENT_FROM at any decimals asked


def fixed(x: float, digits: int) -> str:
    """x with `digits` decimals, rounded half away from zero; "0.00", never "-0.00".

    >>> fixed(0.125, 2), fixed(-0.0004, 2), fixed(-0.0, 1), fixed(2.5, 0), fixed(1e21, 2), fixed(1e-9, 9)
    ('0.13', '0.00', '0.0', '3', '1e+21', '0.000000001')
    """
    x = float(x)  # numpy's and torch's scalars too
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if abs(x) >= EXPONENT_FROM:
        return repr(float(x))
    text = format(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP, context=_EXACT), "f")
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def signed(x: float, digits: int) -> str:
    """x with its sign and `digits` decimals; a value that rounds to zero reads "+0.00".

    >>> signed(-0.0004, 2), signed(-0.25, 2), signed(1.5, 1), signed(float("nan"), 2)
    ('+0.00', '-0.25', '+1.5', 'nan')
    """
    text = fixed(x, digits)
    return text if text.startswith("-") or text == "nan" else "+" + text


def change(x: float, digits: int = 3) -> str:
    """A small change with its sign: `digits` decimals, more where those would read as zero, so that
    one that is not 0 never reads "+0.000" (down to 1e-9, past which it is 0 to float32 anyway).

    >>> change(-0.0616), change(-0.0002), change(6e-6), change(0.0), change(-1e-12)
    ('-0.062', '-0.0002', '+0.000006', '+0.000', '+0.000')
    """
    if x != 0 and math.isfinite(x) and fixed(x, digits).lstrip("-") == fixed(0.0, digits):
        needed = -math.floor(math.log10(abs(x)))  # the decimals that show its first digit
        digits = needed if needed <= 9 else digits
    return signed(x, digits)


#: From here a probability under 1 would round to "100%" with no decimal.
NEARLY_ALL = 0.995


def percent(p: float) -> str:
    """A probability as a percentage: one decimal under 10%, none above; one under 1 is never "100%"
    (one decimal from 99.5%, and ">99.9%" where that too would round to 100).

    >>> percent(0.9526), percent(0.0171), percent(0.0004), percent(0.125), percent(0.995), percent(0.9996)
    ('95%', '1.7%', '0.0%', '13%', '99.5%', '>99.9%')
    """
    if NEARLY_ALL <= p < 1:
        tenths = fixed(100 * p, 1)
        return (">99.9" if tenths == "100.0" else tenths) + "%"
    return fixed(100 * p, 1 if p < 0.1 else 0) + "%"


def quote(token: str) -> str:
    """A member or word in quotes, readable form (␣ for a leading space).

    >>> quote("␣have")
    '“␣have”'
    """
    return f"“{token}”"


def clipped(text: str, n: int = 40) -> str:
    """text in quotes, cut to n characters with an ellipsis.

    >>> clipped("Cash or credit card? I have a lot", 12)
    '“Cash or cre…”'
    """
    return quote(text if len(text) <= n else text[:n - 1] + "…")


def brief(result, what: str, more: str) -> str:
    """A result's repr: its kind, what it found in a few words, and where the rest is.

    >>> brief(3.5, "of nothing", ".real")
    '<float of nothing; .real>'
    """
    return f"<{type(result).__name__} {what}; {more}>"
