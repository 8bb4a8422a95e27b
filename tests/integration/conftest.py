"""Fixtures of the integration tier: the shared tiny random model, loaded, and its studies.

Session-scoped: the tests read these and never change them.
"""
from __future__ import annotations

import pytest

import studygroup
from conftest import TEXT_A, TEXT_B
from studygroup.study import compare as study_compare
from studygroup.study import explain as study


@pytest.fixture(scope="session")
def model(tiny_model):
    """The shared tiny model (tests/conftest.py: tiny_model), loaded."""
    return studygroup.load(tiny_model.path)


@pytest.fixture(scope="session")
def analysis(model):
    """explain's analysis of TEXT_B (the explanation and its run), top 5 words."""
    return study.analyse(model, TEXT_B, top=5)


@pytest.fixture(scope="session")
def comparison(model):
    """compare(TEXT_A, TEXT_B), top 5 words."""
    return study_compare.compare(model, TEXT_A, TEXT_B, top=5)
