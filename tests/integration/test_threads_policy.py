"""The thread policy at the library's first use, each case in a fresh interpreter (libgomp reads its
settings once, when torch is imported): the bare import sets nothing; the first use sets the CLI's
policy unless the user set one or turned it off; torch imported first gets one line, once."""
import json
import os
import subprocess
import sys

import pytest

from studygroup.model import threads

SCRIPT = """
import json, os, sys
{before}
import studygroup
state = {{"import": {{k: os.environ.get(k) for k in {variables!r}}}, "torch_at_import": "torch" in sys.modules}}
model = studygroup.load({path!r}, cache=False)
model.run([1, 2, 3])
model.run([3, 2, 1])
state["first_use"] = {{k: os.environ.get(k) for k in {variables!r}}}
print(json.dumps(state))
"""


def first_use(path, env: dict[str, str], before: str = "") -> tuple[dict, str]:
    """(the variables after `import studygroup` and after two passes, stderr) in a fresh interpreter."""
    clean = {k: v for k, v in os.environ.items() if k not in (*threads.VARIABLES, threads.SWITCH)}
    script = SCRIPT.format(before=before, variables=threads.VARIABLES, path=str(path))
    done = subprocess.run([sys.executable, "-c", script], env={**clean, **env}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_the_bare_import_sets_nothing_and_the_first_use_sets_the_policy(tiny_model):
    state, stderr = first_use(tiny_model.path, {})
    assert state["import"] == {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None} and not state["torch_at_import"]
    chosen = {k: v for k, v in state["first_use"].items() if v is not None}
    assert chosen in ({"GOMP_SPINCOUNT": str(threads.SPIN)}, {"OMP_WAIT_POLICY": "PASSIVE"})
    assert stderr == ""


@pytest.mark.parametrize("env", [{"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "5"}])
def test_a_policy_the_user_set_is_kept(tiny_model, env):
    state, stderr = first_use(tiny_model.path, env)
    assert {k: v for k, v in state["first_use"].items() if v is not None} == env
    assert stderr == ""


def test_off_sets_nothing(tiny_model):
    state, stderr = first_use(tiny_model.path, {threads.SWITCH: "off"})
    assert state["first_use"] == {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None}
    assert stderr == ""


def test_torch_imported_first_is_told_once(tiny_model):
    state, stderr = first_use(tiny_model.path, {}, before="import torch")
    assert state["first_use"] == {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None}  # too late to choose
    assert stderr == threads.HINT + "\n"  # one line, once for two passes


@pytest.mark.parametrize("env", [{"OMP_WAIT_POLICY": "PASSIVE"}, {threads.SWITCH: "off"}])
def test_torch_imported_first_says_nothing_when_the_user_chose(tiny_model, env):
    _, stderr = first_use(tiny_model.path, env, before="import torch")
    assert stderr == ""
