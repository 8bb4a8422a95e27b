"""formats.percent and formats.change: a probability under 1 is never written as 100%, a change that
is not 0 never as +0.000, and each string reads back to within its own rounding of the number."""
import math
import re

import pytest

from studygroup.formats import change, percent

UNDER_ONE = [0.9, 0.949, 0.95, 0.99, 0.9949, 0.995, 0.99949, 0.9995, 0.9996, 0.99999, 1 - 1e-12]


@pytest.mark.parametrize("p", UNDER_ONE)
def test_a_probability_under_one_is_not_written_as_all(p):
    text = percent(p)
    assert text not in ("100%", "100.0%"), text
    if text.startswith(">"):
        assert text == ">99.9%" and p >= 0.9995
    else:
        digits = len(re.sub(r".*\.|%", "", text)) if "." in text else 0
        assert abs(float(text[:-1]) - 100 * p) <= 0.5 * 10 ** -digits + 1e-9, text


def test_one_is_all():
    assert percent(1.0) == "100%"


@pytest.mark.parametrize("x", [-0.0616, 0.0004, -0.0002, 6e-6, -4.9e-5, 1.5e-9, 0.9999])
def test_a_change_that_is_not_zero_reads_as_itself(x):
    text = change(x)
    digits = len(text.split(".")[1])
    assert float(text) != 0 and (text[0] == "-") == (x < 0), text
    assert abs(float(text) - x) <= 0.5 * 10 ** -digits + 1e-15, text
    assert digits == max(3, -math.floor(math.log10(abs(x))))  # 3 decimals, or as many as its first digit needs
