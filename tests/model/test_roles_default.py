"""roles and why on the real default model: the probe finds induction heads, and why adds up on
the article's sentence."""
import math

import pytest

from studygroup.study.roles import roles
from studygroup.study.why import why

TEXT = "Cash or credit card? I have a lot"


@pytest.fixture(scope="module")
def probe_roles(model):
    return roles(model)


def test_the_probe_finds_induction_and_previous_member_heads(probe_roles):
    by_head = {(h.layer, h.head): h.roles for h in probe_roles.heads}
    assert len(by_head) == 270 and probe_roles.text is None and len(probe_roles.token_ids) == 100
    assert max(r.induction for r in by_head.values()) > 0.5
    # the heads and values the issue measured on such a probe: induction 0.93 (18.6), ~0.8 (17.3, 17.4);
    # previous 0.92 (16.0)
    assert by_head[18, 6].induction == pytest.approx(0.93, abs=0.02)
    assert by_head[17, 3].induction == pytest.approx(0.80, abs=0.03) and by_head[17, 4].induction == pytest.approx(0.80, abs=0.03)
    assert by_head[16, 0].previous == pytest.approx(0.92, abs=0.02)
    top = sorted(by_head, key=lambda h: -by_head[h].induction)[:3]
    assert set(top) == {(18, 6), (17, 3), (17, 4)}  # the three strongest induction heads
    assert sorted(r.induction for r in by_head.values())[135] < 0.05  # most heads near 0


@pytest.mark.parametrize("query, key", [(9, 0), (9, 5), (7, 6)])
def test_why_adds_up_for_the_head_that_rests_on_the_sink(model, query, key):
    w = why(model, TEXT, 24, 6, query, key)
    assert w.n_parts == 241 and len(w.pairs) == 241 * 241
    tolerance = 1e-5 * max(1.0, abs(w.score))
    assert abs(math.fsum(p.value for p in w.pairs) - w.score) <= tolerance
    assert w.content + w.position == pytest.approx(w.score, abs=1e-12)
