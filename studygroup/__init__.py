"""studygroup: the attention layer of a real language model, as a study group you can question.

>>> import studygroup
>>> model = studygroup.load()                       # doctest: +SKIP
>>> run = model.run("Cash or credit card? I have a lot")   # doctest: +SKIP

Names are imported on first use, so that `import studygroup` (and the CLI's start) stays fast.
"""
from importlib import import_module

from studygroup.errors import InputError, ModelFileError, NotationError, StudyGroupError

_LAZY = {
    "load": ("studygroup.model", "load"),
    "Model": ("studygroup.model", "Model"),
    "Run": ("studygroup.run", "Run"),
    "Head": ("studygroup.run", "Head"),
    "Record": ("studygroup.record", "Record"),
    "Config": ("studygroup.config", "Config"),
    "softmax_example": ("studygroup.softmax_example", "softmax_example"),
    "explain": ("studygroup.study", "explain"),
    "compare": ("studygroup.study_compare", "compare"),
    "head_view": ("studygroup.study_head", "head_view"),
    "model_view": ("studygroup.study_view", "model_view"),
}
_MODULES = {"attention", "record", "model", "run", "rope", "silence", "weights", "tokenizer", "config", "cache",
            "attribution", "effects", "lesson", "study", "study_compare", "study_head", "study_view"}

__all__ = ["InputError", "ModelFileError", "NotationError", "StudyGroupError", *_LAZY, *sorted(_MODULES)]


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(import_module(module), attr)
    if name in _MODULES:
        return import_module(f"studygroup.{name}")
    raise AttributeError(f"module 'studygroup' has no attribute {name!r}")
