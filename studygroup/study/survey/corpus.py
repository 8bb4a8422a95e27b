"""The sequences a survey scores: a corpus cut into sequences of `tokens` token ids each.

- probe: sequence k is the first `tokens` ids of the standard probe drawn with seed + k
  (`roles.probe_ids(n=(tokens + 1) // 2)`: that many ordinary tokens repeated twice, after the BOS
  where the model adds one), so that every sequence gives an induction head something to copy;
- pydoc: the topics of Python's own help (`pydoc_data.topics`, technical English that ships with
  every Python), in the order of their names;
- files: the given text files (a folder: every file under it, in path order).

A document (a pydoc topic, a file) is tokenized whole and cut into consecutive sequences of
`tokens` ids (each starting with the BOS where the model adds one); what is left at its end,
shorter than `tokens`, is not scored; a sequence never spans two documents. `n` keeps the first n
sequences (the probe's default: 200).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from studygroup.errors import InputError
from studygroup.study.roles import probe_ids

#: The built-in corpora, and how many probe sequences a survey draws when not told.
CORPORA = ("probe", "pydoc")
PROBE_SEQUENCES = 200


@dataclass(frozen=True)
class Corpus:
    """A survey's sequences: (S, tokens) token ids, and what they were cut from."""

    name: str  # "probe", "pydoc" or "files"
    description: str  # one line: what the sequences are
    sequences: np.ndarray  # (S, tokens) int64

    @property
    def sha256(self) -> str:
        """SHA-256 of the sequences' token ids (int64, little-endian, row by row)."""
        return hashlib.sha256(self.sequences.astype("<i8").tobytes()).hexdigest()


def corpus(model, name: str | None = None, files=(), tokens: int = 64, n: int | None = None, seed: int = 0) -> Corpus:
    """The sequences of a built-in corpus (`name`) or of text files; InputError when they give none.

    >>> c = corpus(model, "probe", tokens=16, n=3)
    >>> c.sequences.shape, bool((c.sequences[0, :8] == c.sequences[0, 8:]).all())
    ((3, 16), True)
    """
    check_counts(model, tokens, n)
    if (name is None) == (not files):
        raise InputError("give text files or --corpus probe|pydoc (one of them)")
    if name == "probe":
        return _probe(model, tokens, PROBE_SEQUENCES if n is None else n, seed)
    if name == "pydoc":
        return _documents(model, "pydoc", "the topics of Python's help (pydoc_data.topics)", _pydoc_topics(), tokens, n)
    if name is not None:
        raise InputError(f"--corpus {name}: the built-in corpora are {', '.join(CORPORA)} (or give text files)")
    paths = text_files(files)
    return _documents(model, "files", f"{len(paths)} text file{'s' * (len(paths) != 1)}",
                      [read_text(p) for p in paths], tokens, n)


def check_counts(model, tokens: int, n: int | None) -> None:
    """InputError unless 2 <= tokens <= the model's context and n (when given) >= 1."""
    context = model.config.context_length
    if not isinstance(tokens, int) or not 2 <= tokens <= context:
        raise InputError(f"tokens={tokens}: give a sequence length of 2 to {context} tokens (the model's context)")
    if n is not None and (not isinstance(n, int) or n < 1):
        raise InputError(f"n={n}: give at least 1 sequence")


def _probe(model, tokens: int, n: int, seed: int) -> Corpus:
    half = (tokens + 1) // 2
    ids = np.array([probe_ids(model.tokenizer, model.config.vocab_size, half, seed + k)[:tokens] for k in range(n)])
    return Corpus("probe", f"{n} probe sequences of {tokens} tokens ({half} ordinary tokens drawn with "
                           f"numpy.random.default_rng({seed} + k), repeated, cut to {tokens})", ids)


def _documents(model, name: str, what: str, texts: list[str], tokens: int, n: int | None) -> Corpus:
    bos = [model.tokenizer.bos_id] if model.tokenizer.add_bos else []
    body = tokens - len(bos)
    out = []
    for text in texts:
        ids = model.tokenize(text)[len(bos):]
        out += [bos + ids[k:k + body] for k in range(0, len(ids) - body + 1, body)]
        if n is not None and len(out) >= n:
            break
    if not out:
        raise InputError(f"{what} give no sequence of {tokens} tokens: give longer texts or a smaller --tokens")
    out = out[:n]
    return Corpus(name, f"{len(out)} sequences of {tokens} tokens cut from {what}", np.array(out, dtype=np.int64))


def _pydoc_topics() -> list[str]:
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def text_files(paths) -> list[Path]:
    """The files to read: each path given, a folder as every file under it (path order, hidden
    files and folders left out). InputError for a path that does not exist or a folder of none."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and not _hidden(f.relative_to(p)))
            if not found:
                raise InputError(f"{p} holds no files: give text files, or a folder that holds some")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise InputError(f"{p} does not exist: give text files or a folder of them")
    return out


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def read_text(path: Path) -> str:
    """A file's text: InputError when it is empty, holds NUL bytes or is not UTF-8."""
    data = path.read_bytes()
    if not data.strip():
        raise InputError(f"{path} is empty: give files with text in them")
    if b"\0" in data:
        raise InputError(f"{path} is not a text file (it holds NUL bytes): give UTF-8 text files")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not UTF-8 text (byte {e.start} cannot be decoded): give UTF-8 text files") from None
