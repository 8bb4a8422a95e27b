"""bench/shaped_gguf.py's Q4_K_M rule against files llama.cpp's quantizer wrote: the three packaged
Q4_K_M models (Qwen2.5-Coder 0.5B, whose rows of 896 weights fall back to Q5_0 and Q8_0, and 1.5B,
qwen2, their layers listed 0, 1, 10, 11, …; Gemma 3 270M, gemma3), every tensor's type as the rule
gives it from the names and shapes in the file's order alone."""
import importlib.util
import sys
from pathlib import Path

import pytest

from studygroup.gguf.container import read_gguf
from studygroup.model.packaged import assembled

BENCH = Path(__file__).resolve().parents[2] / "bench" / "shaped_gguf.py"
_spec = importlib.util.spec_from_file_location("shaped_gguf", BENCH)
shaped = sys.modules.setdefault("shaped_gguf", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(shaped)


@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "gemma-3-270m"])
def test_every_tensor_has_the_type_the_rule_gives(name):
    file = read_gguf(assembled(name))
    arch = file.fields["general.architecture"]
    rule = shaped.q4_k_m_types([(n, t.shape) for n, t in file.tensors.items()], file.fields[f"{arch}.block_count"])
    assert {n: t.qtype.name for n, t in file.tensors.items()} == {n: q.name for n, q in rule.items()}
