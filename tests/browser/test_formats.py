"""One way to write a number: studygroup/formats.py and the page's format.js, fed the same values,
write the same strings (the page's script run in chromium, with no server)."""
import math
from pathlib import Path

import pytest

from studygroup import formats

FORMAT_JS = Path(formats.__file__).parent / "views" / "static" / "format.js"
NAN, INF = float("nan"), float("inf")
#: Negative zero, ties, what rounds to zero from either side, tiny, huge (toFixed's exponent form
#: from 1e21), NaN, ±inf and integers.
VALUES = [0.0, -0.0, -0.0004, 0.0004, -0.004, 0.125, -0.125, 2.5, -2.5, 0.005, 0.045, 1 / 3, -2 / 3, 0.0999, 0.1,
          0.9526, 0.99, 0.9949, 0.995, 0.99949, 0.9995, 0.9996, 1 - 1e-12, 1.0, 1e-7, -1e-7, 5e-324, -5e-324, 1e-300, 123456.789, 1e20, -1e20, 999999999999999999999.0, 1e21,
          -1e21, 1.5e300, -1.5e300, NAN, INF, -INF, 0, 3, -3, 100]
DIGITS = [0, 1, 2, 3, 4, 7, 9]


def as_js(x: float) -> str:
    """A float as text JavaScript's Number() reads back to the same value (repr does, but for nan and inf)."""
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity") if math.isinf(x) else repr(float(x))


def python_strings() -> dict:
    return {"fixed": [[formats.fixed(x, d) for d in DIGITS] for x in VALUES],
            "signed": [[formats.signed(x, d) for d in DIGITS] for x in VALUES],
            "percent": [formats.percent(x) for x in VALUES]}


@pytest.fixture(scope="module")
def page_strings(browser):
    page = browser.new_page()
    try:
        page.set_content("<!doctype html><title>formats</title>")
        page.add_script_tag(content=FORMAT_JS.read_text())
        return page.evaluate("""([values, digits]) => {
            const sg = window.StudyGroup, xs = values.map(Number);
            return { fixed: xs.map((x) => digits.map((d) => sg.fixed(x, d))),
                     signed: xs.map((x) => digits.map((d) => sg.signed(x, d))),
                     percent: xs.map((x) => sg.percent(x)),
                     negative: xs.map((x) => x < 0 || Object.is(x, -0)) };
        }""", [[as_js(x) for x in VALUES], DIGITS])
    finally:
        page.close()


@pytest.mark.parametrize("kind", ["fixed", "signed", "percent"])
def test_the_page_writes_numbers_as_python_does(page_strings, kind):
    ours = python_strings()[kind]
    differ = [(VALUES[i], ours[i], page_strings[kind][i]) for i in range(len(VALUES)) if ours[i] != page_strings[kind][i]]
    assert not differ, "value, Python, page:\n" + "\n".join(map(str, differ))


def test_the_page_got_the_values_with_their_signs(page_strings):
    assert page_strings["negative"] == [not math.isnan(x) and math.copysign(1, x) < 0 for x in VALUES]


@pytest.mark.parametrize("x, digits, expected", [
    (-0.0004, 2, "+0.00"),  # rounds to zero: zero, signed "+"
    (-0.0, 2, "+0.00"),
    (-0.004, 2, "+0.00"),
    (-0.006, 2, "-0.01"),
    (0.125, 2, "+0.13"),  # a tie, away from zero
    (-0.125, 2, "-0.13"),
    (NAN, 2, "nan"),
    (INF, 1, "+inf"),
    (-INF, 1, "-inf"),
    (1e21, 2, "+1e+21"),
    (3, 2, "+3.00"),
])
def test_signed_follows_the_rules(x, digits, expected):
    assert formats.signed(x, digits) == expected
