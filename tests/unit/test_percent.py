"""formats.percent: a probability under 1 is never written as 100%, and each string reads back to
within its own rounding of the probability."""
import re

import pytest

from studygroup.formats import percent

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
