"""How a model is named to a person: `{general.basename} {general.size_label} · quantization · file
size`, made once (`Config.label`) and shown by the model's repr, /api/info, `serve`'s first line and
the page; checked against gguf's own reader of the same file and the file's size on disk."""
import os
import re
import subprocess
import sys

import gguf
import httpx
from gguf import GGMLQuantizationType as Q

import studygroup
from conftest import write_tiny_gguf
from studygroup.gguf.config import size_text
from studygroup.views.payloads import info


def test_the_label_is_basename_size_label_quantization_and_file_size(tmp_path):
    tiny = write_tiny_gguf(tmp_path / "q8.gguf", tensor_type=Q.Q8_0, metadata={
        "general.name": "Tiny Random 1K Mix Ep2", "general.basename": "tiny", "general.size_label": "1K",
        "general.file_type": int(gguf.LlamaFileType.MOSTLY_Q8_0)})
    model = studygroup.load(tiny.path, cache=False)
    size = os.path.getsize(tiny.path)
    assert model.config.label == f"tiny 1K · Q8_0 · {size_text(size)}" and size_text(size).endswith(" MB")
    assert f"<Model {model.config.label} (llama)" in repr(model)
    m = info(model)["model"]
    assert (m["name"], m["quantization"], m["file_size"], m["label"], m["note"]) == \
           ("tiny 1K", "Q8_0", size, model.config.label, "")


def test_without_a_file_type_the_quantization_is_the_type_holding_most_values(tmp_path):
    tiny = write_tiny_gguf(tmp_path / "mixed.gguf", tensor_type=Q.Q4_0, type_overrides={"token_embd.weight": Q.Q8_0})
    reader = gguf.GGUFReader(tiny.path)  # gguf's own reader: values per tensor type
    counts = {}
    for t in reader.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + int(t.n_elements)
    commonest = max(counts, key=counts.get)
    assert "general.file_type" not in reader.fields and len(counts) == 3  # Q4_0, Q8_0 and the F32 norms
    config = studygroup.load(tiny.path, cache=False).config
    assert config.quantization == commonest and config.label == f"tiny-random-llama · {commonest} · {size_text(os.path.getsize(tiny.path))}"


def test_serve_names_the_model_by_its_label(tiny_model):
    cmd = [sys.executable, "-m", "studygroup.cli", "serve", "--model", str(tiny_model.path), "--port", "0", "--no-warm"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        line = proc.stdout.readline()
        label = f"tiny-random-llama · F32 · {size_text(os.path.getsize(tiny_model.path))}"
        assert line.startswith(f"studygroup: serving {label} at "), line
        url = re.search(r" at (http://127\.0\.0\.1:\d+/)", line).group(1)
        assert httpx.get(url + "api/info", timeout=30, trust_env=False).json()["model"]["label"] == label
    finally:
        proc.terminate()
        proc.wait(15)


def test_explain_names_the_model_by_its_label(tiny_model, capsys):
    from studygroup.cli import main

    assert main(["explain", "the tin", "--model", str(tiny_model.path), "--measure-heads", "0"]) == 0
    label = f"tiny-random-llama · F32 · {size_text(os.path.getsize(tiny_model.path))}"
    assert f"the group's conclusion (next word; model {label}):" in capsys.readouterr().out.splitlines()
