"""Damaged and hostile GGUF files: each is refused in one line naming the file and what is wrong,
before anything large is allocated; never a traceback, never a wrong answer. Files are made by
the suite's own writer (conftest) and damaged here, at fixed places or fixed seeds."""
from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import spm_vocab, tiny_vocab, write_tiny_gemma3_gguf, write_tiny_gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from integration.test_cli import cli
from integration.test_qwen_mistral import write_tiny
from studygroup.errors import ModelFileError
from studygroup.gguf.container import read_gguf
from studygroup.gguf.summary import summarize
from studygroup.gguf.tokenizer import Tokenizer
from studygroup.gguf.weights import read_weights

ROOT = Path(__file__).resolve().parents[2]
TOKENS, TYPES, MERGES = tiny_vocab()


def explain(path: Path, tmp_path: Path, limit_bytes: int = 3 << 30) -> subprocess.CompletedProcess:
    """`studygroup explain` on a model file, in a process of its own with bounded memory and time."""
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))  # noqa: E731
    env = dict(os.environ, STUDYGROUP_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-m", "studygroup.cli", "explain", "the tin", "--model", str(path)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=60, preexec_fn=limit)


def refused(p: subprocess.CompletedProcess, *words: str) -> bool:
    return (p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1
            and p.stderr.startswith("studygroup: error: ") and all(w in p.stderr for w in words))


@pytest.mark.parametrize("metadata, words", [
    ({"llama.rope.freq_base": "ten thousand"}, ["llama.rope.freq_base", "a number"]),
    ({"tokenizer.ggml.bos_token_id": "one"}, ["bos_token_id", "whole number"]),
    ({"tokenizer.ggml.token_type": ["normal"] * len(TOKENS)}, ["token_type", "list of whole numbers"]),
    ({"tokenizer.ggml.tokens": list(range(len(TOKENS)))}, ["tokenizer.ggml.tokens", "list of strings"]),
    ({"tokenizer.ggml.merges": list(range(len(MERGES)))}, ["tokenizer.ggml.merges", "list of strings"]),
    ({"tokenizer.ggml.merges": MERGES + ["zz qq"]}, ["merge 13", "'zz'", "not a token"]),
    ({"tokenizer.ggml.tokens": [TOKENS[0]] * len(TOKENS)}, ["tokenizer.ggml.merges", "not a token"]),
    ({"llama.block_count": 2**32 - 1}, ["block_count = 4294967295", "holds 20"]),
])
def test_metadata_of_the_wrong_kind_or_size_is_one_line(tmp_path, metadata, words):
    path = write_tiny_gguf(tmp_path / "m.gguf", metadata=metadata).path
    start = time.perf_counter()
    p = explain(path, tmp_path)
    assert refused(p, str(path), *words), p.stderr[-2000:]
    assert time.perf_counter() - start < 60


def gguf_bytes(kv: bytes, n_kv: int = 1, n_tensors: int = 0) -> bytes:
    """A GGUF header (version 3) followed by raw metadata bytes."""
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kv


def key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


@pytest.mark.parametrize("data, words", [
    (gguf_bytes(b"", n_kv=2**60), ["claims 1152921504606846976 metadata entries"]),
    (gguf_bytes(b"", n_kv=0, n_tensors=2**40), ["claims 1099511627776 tensors"]),
    (gguf_bytes(key("tokenizer.ggml.tokens") + struct.pack("<IIQ", V.ARRAY, V.STRING, 2**40)),
     ["1099511627776 items in metadata tokenizer.ggml.tokens"]),
    (gguf_bytes(key("x") + struct.pack("<I", V.ARRAY) + struct.pack("<IQ", V.ARRAY, 1) * 100_000
                + struct.pack("<IQ", V.UINT8, 0)), ["metadata x nests arrays more than 2 deep"]),
])
def test_counts_and_nesting_are_checked_before_anything_is_made(tmp_path, data, words):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    p = explain(path, tmp_path, limit_bytes=1 << 30)
    assert refused(p, str(path), *words), p.stderr[-2000:]


def tensor_offset_field(path: Path, name: str) -> int:
    """Where tensor `name`'s offset is written in the file's tensor directory."""
    data = path.read_bytes()
    at = data.index(struct.pack("<Q", len(name)) + name.encode()) + 8 + len(name)
    n_dims = struct.unpack_from("<I", data, at)[0]
    return at + 4 + 8 * n_dims + 4


def test_a_tensor_offset_moved_by_one_byte_is_refused(tmp_path):
    path = write_tiny_gguf(tmp_path / "m.gguf").path
    at = tensor_offset_field(path, "blk.0.attn_q.weight")
    data = bytearray(path.read_bytes())
    offset = struct.unpack_from("<Q", data, at)[0]
    struct.pack_into("<Q", data, at, offset + 1)
    path.write_bytes(bytes(data))
    assert refused(explain(path, tmp_path), str(path), "blk.0.attn_q.weight", "not a multiple of general.alignment")


def test_overflowing_scales_are_one_line_without_numpy_warnings(tmp_path):
    model = write_tiny_gguf(tmp_path / "q.gguf", tensor_type=Q.Q8_0)
    info = read_gguf(model.path).tensors["blk.0.attn_q.weight"]
    data = bytearray(model.path.read_bytes())
    for i in range(info.offset, info.offset + info.n_bytes, 34):  # each Q8_0 block starts with its f16 scale
        data[i:i + 2] = np.float16(np.inf).tobytes()
    model.path.write_bytes(bytes(data))
    assert refused(explain(model.path, tmp_path), "blk.0.attn_q.weight", "not finite")


class Valid(bytes):
    """A valid file's bytes, shown short in a failing example."""

    def __repr__(self) -> str:
        return f"<{len(self)} bytes of a valid GGUF>"


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> Valid:
    return Valid(write_tiny_gguf(tmp_path_factory.mktemp("fuzz") / "m.gguf", n_layers=1).path.read_bytes())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_file_is_refused_or_read_never_a_traceback(valid, tmp_path, data):
    """Flips, truncations and overwritten counts in the header, metadata and tensor directory."""
    header_end = read_gguf_end(valid)
    damaged = bytearray(valid)
    kind = data.draw(st.sampled_from(["flip", "truncate", "u64"]))
    at = data.draw(st.integers(4, header_end - 1))
    if kind == "flip":
        damaged[at] ^= data.draw(st.integers(1, 255))
    elif kind == "truncate":
        damaged = damaged[:at]
    else:
        struct.pack_into("<Q", damaged, min(at, len(damaged) - 8), data.draw(st.integers(0, 2**64 - 1)))
    path = tmp_path / "fuzzed.gguf"
    path.write_bytes(bytes(damaged))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        config, weights = read_weights(path)
        tokenizer = Tokenizer.from_gguf(path)
    except ModelFileError as e:
        assert "\n" not in str(e) and str(e)
    else:
        assert all(bool(np.isfinite(t.numpy()).all()) for t in weights.values())
        assert tokenizer.vocab_size > 0 and config.n_layers == 1
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < (1 << 20)  # KiB: under 1 GiB more


def read_gguf_end(data: bytes) -> int:
    """Where the tensor data starts in a valid file: everything before it is parsed."""
    return min(info.offset for info in _tensors(data).values())


def _tensors(data: bytes):
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
        f.write(data)
        f.flush()
        return read_gguf(f.name).tensors


# ---- the vocabulary against the embedding's rows (issue 33, A2) ------------------------------------
def vocabulary_changed(family: str, path: Path, change: int) -> Path:
    """A tiny file of `family` whose tokenizer lists `change` more tokens (fewer when negative) than
    the embedding has rows, every other key as written."""
    if family == "gemma3":
        tokens, types, scores = spm_vocab()
    else:
        tokens, types, scores = *tiny_vocab()[:2], None
    if change > 0:
        tokens, types = tokens + [f"<extra_{i}>" for i in range(change)], types + [1] * change
        scores = scores and scores + [0.0] * change
    else:
        tokens, types, scores = tokens[:change], types[:change], scores and scores[:change]
    metadata = {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types}
    if family == "gemma3":
        return write_tiny_gemma3_gguf(path, metadata=metadata | {"tokenizer.ggml.scores": scores}).path
    if family == "llama":
        return write_tiny_gguf(path, metadata=metadata).path
    return write_tiny(path, family, metadata=metadata)


@pytest.mark.parametrize("family, change", [("gemma3", -20), ("gemma3", 50), ("qwen2", 50), ("qwen3", 50),
                                            ("phi3", 50), ("llama", 50), ("llama", -20)])
def test_a_vocabulary_that_does_not_fit_the_embedding_is_refused_at_load(tmp_path, family, change):
    path = vocabulary_changed(family, tmp_path / f"{family}.gguf", change)
    rows = read_gguf(path).tensors["token_embd.weight"].shape[0]
    with pytest.raises(ModelFileError) as e:
        read_weights(path)
    assert str(e.value).startswith(f"{path}: the tokenizer has {rows + change} tokens (tokenizer.ggml.tokens) "
                                   f"but tensor token_embd.weight has {rows} rows")
    summary = summarize((path,))
    assert not summary.readable and f"has {rows} rows" in summary.reason


@pytest.mark.parametrize("top", [3, 50])
def test_gemma3_with_20_tokens_fewer_than_rows_is_one_line_whatever_the_top(capsys, tmp_path, top):
    path = vocabulary_changed("gemma3", tmp_path / "gemma3.gguf", -20)
    code, out, err = cli(capsys, "explain", "the tin", "--model", path, "--top", top, "--measure-heads", 0)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}: the tokenizer has" in err and "token_embd.weight" in err
