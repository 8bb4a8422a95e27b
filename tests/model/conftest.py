"""Fixtures of the model tier: the real default model."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def model(default_model):
    """The default model (SmolLM2-135M-Instruct), loaded once for the run (conftest.py at the root)."""
    return default_model
