"""studygroup: the attention layer of a real language model, as a study group you can question.

>>> import studygroup
>>> model = studygroup.load()
>>> run = model.run("Cash or credit card? I have a lot")

Names are imported on first use, so that `import studygroup` (and the CLI's start) stays fast.
"""
import sys
from importlib import import_module

from studygroup.errors import InputError, ModelFileError, NotationError, StudyGroupError

_LAZY = {
    "load": ("studygroup.model.model", "load"),
    "Model": ("studygroup.model.model", "Model"),
    "Run": ("studygroup.model.run", "Run"),
    "Head": ("studygroup.model.run", "Head"),
    "Record": ("studygroup.model.record", "Record"),
    "Config": ("studygroup.gguf.config", "Config"),
    "softmax_example": ("studygroup.formulas.softmax_example", "softmax_example"),
    "explain": ("studygroup.study.explain", "explain"),
    "compare": ("studygroup.study.compare", "compare"),
    "head_view": ("studygroup.study.head", "head_view"),
    "model_view": ("studygroup.study.model_view", "model_view"),
    "why": ("studygroup.study.why", "why"),
    "roles": ("studygroup.study.roles", "roles"),
    "survey": ("studygroup.study.survey.survey", "survey"),
    "load_survey": ("studygroup.study.survey.survey", "load_survey"),
}
#: Modules reachable as attributes (`studygroup.attention.paper(...)`), by their short names.
_MODULES = {"attention": "formulas.attention", "masks": "formulas.masks", "rope": "formulas.rope",
            "config": "gguf.config", "tokenizer": "gguf.tokenizer", "weights": "gguf.weights",
            "record": "model.record", "run": "model.run", "attribution": "study.attribution",
            "effects": "study.effects", "lesson": "study.lesson_sections"}

__all__ = ["InputError", "ModelFileError", "NotationError", "StudyGroupError", *_LAZY, *sorted(_MODULES)]


def __getattr__(name: str):
    if name in _LAZY:
        _first_use()
        module, attr = _LAZY[name]
        return getattr(import_module(module), attr)
    if name in _MODULES:
        _first_use()
        return import_module(f"studygroup.{_MODULES[name]}")
    raise AttributeError(f"module 'studygroup' has no attribute {name!r}")


_ready = False


def _first_use() -> None:
    """What the library's first use sets up (never the bare import): how torch's threads wait
    (before torch is imported: see studygroup.model.threads), and in IPython, its HTML views."""
    global _ready
    if _ready:
        return
    _ready = True
    from studygroup.model import threads

    threads.at_first_use()
    _show_in_notebooks()


def _show_in_notebooks() -> None:
    """In a running IPython (a Jupyter notebook), draw explain's results with the page's views."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return
    from studygroup.study.results import Explanation
    from studygroup.views.report import notebook_html

    shell.display_formatter.formatters["text/html"].for_type(Explanation, notebook_html)
