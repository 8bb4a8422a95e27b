"""Fixtures of the model tier: the real default model."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def model(default_model):
    """The default model (SmolLM2-135M-Instruct), loaded once for the run (conftest.py at the root)."""
    return default_model


@pytest.fixture(scope="session")
def theirs():
    """transformers' own GGUF loader on the default file, offline (about 15-30 s: loaded once)."""
    import os

    import transformers

    from studygroup.gguf.model_path import default_model_path

    path = default_model_path()
    before = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name).eval()
    finally:
        os.environ.pop("HF_HUB_OFFLINE") if before is None else os.environ.update(HF_HUB_OFFLINE=before)
