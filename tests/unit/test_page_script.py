"""The page's script is views registered in one list, never a class patched from other files."""
from __future__ import annotations

import re

from studygroup.views import assets


def test_no_script_patches_a_prototype_or_mixes_methods_in():
    """A view is a class of its own (StudyGroup.view): no file adds methods to another's prototype."""
    for name in assets.SCRIPTS:
        text = assets.static_text(name)
        assert not re.search(r"\.prototype\b|\bmixin\s*\(", text), f"{name} adds methods to a class defined elsewhere"

