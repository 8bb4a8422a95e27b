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
    assert by_head[18, 6].induction > 0.8 and by_head[17, 3].induction > 0.6 and by_head[17, 4].induction > 0.6
    assert by_head[16, 0].previous > 0.8
    assert sorted(r.induction for r in by_head.values())[135] < 0.05  # most heads near 0


@pytest.mark.parametrize("query, key", [(9, 0), (9, 5), (7, 6)])
def test_why_adds_up_for_the_head_that_rests_on_the_sink(model, query, key):
    w = why(model, TEXT, 24, 6, query, key)
    assert w.n_parts == 241 and len(w.pairs) == 241 * 241
    tolerance = 1e-5 * max(1.0, abs(w.score))
    assert abs(math.fsum(p.value for p in w.pairs) - w.score) <= tolerance
    assert w.content + w.position == pytest.approx(w.score, abs=1e-12)
