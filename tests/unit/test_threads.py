"""How torch's workers wait: spin briefly on an idle machine, sleep at once on a busy one."""
import os

import pytest

from studygroup import cli
from studygroup.model import threads


@pytest.mark.parametrize("others, cpus, expected", [
    (0, 2, {"GOMP_SPINCOUNT": str(threads.SPIN)}),
    (1, 2, {"OMP_WAIT_POLICY": "PASSIVE"}),
    (5, 2, {"OMP_WAIT_POLICY": "PASSIVE"}),
    (0, 1, {"GOMP_SPINCOUNT": str(threads.SPIN)}),
    (7, 16, {"GOMP_SPINCOUNT": str(threads.SPIN)}),
    (8, 16, {"OMP_WAIT_POLICY": "PASSIVE"}),
    (None, 16, {"OMP_WAIT_POLICY": "PASSIVE"}),  # unknown: the polite choice
])
def test_choose_spins_only_when_half_the_cpus_are_free(others, cpus, expected):
    assert threads.choose({}, others, cpus) == expected


@pytest.mark.parametrize("env", [{"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "PASSIVE"},
                                 {"GOMP_SPINCOUNT": "5"}])
def test_a_value_the_user_set_wins(env):
    assert threads.choose(env, 0, 2) == {}
    assert threads.choose(env, 9, 2) == {}


def test_others_running_takes_the_least_reading_and_excludes_this_process():
    readings = iter(["1.0 1.0 1.0 4/90 1", "1.0 1.0 1.0 2/90 1", "1.0 1.0 1.0 3/90 1"])
    assert threads.others_running(lambda: next(readings), samples=3, gap_s=0) == 1


@pytest.mark.parametrize("text", ["", "garbage", "1 2 3 x/y 4"])
def test_others_running_is_none_when_unreadable(text):
    assert threads.others_running(lambda: text, samples=2, gap_s=0) is None


def test_others_running_on_this_machine_is_a_count():
    n = threads.others_running()
    assert n is None or n >= 0


def test_set_wait_policy_sets_the_environment(monkeypatch):
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "others_running", lambda: 0)
    import sys

    import torch  # noqa: F401 (imported: too late to choose)
    assert threads.set_wait_policy() == {} and "GOMP_SPINCOUNT" not in os.environ
    monkeypatch.delitem(sys.modules, "torch")  # as before torch is imported
    assert threads.set_wait_policy() == {"GOMP_SPINCOUNT": str(threads.SPIN)}
    assert os.environ["GOMP_SPINCOUNT"] == str(threads.SPIN) and "OMP_WAIT_POLICY" not in os.environ
    monkeypatch.setattr(threads, "others_running", lambda: 3)
    assert threads.set_wait_policy() == {}  # the value just set now counts as the user's


def test_the_cli_chooses_before_it_parses(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(threads, "set_wait_policy", lambda serving: calls.append(serving) or {})
    assert cli.main(["--no-such-option"]) == 2
    assert cli.main(["serve", "--no-such-option"]) == 2
    assert calls == [False, True]  # the server's workers sleep at once


def test_a_server_sleeps_at_once_unless_the_user_chose():
    assert threads.choose({}, 0, 2, serving=True) == {"OMP_WAIT_POLICY": "PASSIVE"}  # an idle machine too
    assert threads.choose({"GOMP_SPINCOUNT": "5"}, 0, 2, serving=True) == {}
