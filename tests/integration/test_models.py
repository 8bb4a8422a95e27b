"""`studygroup models` and `--model NAME` on fake Ollama, LM Studio, Hugging Face and llama.cpp
stores laid out as those programs lay them out, in a temporary home, holding small real GGUF files
(written here with gguf's own writer): broken manifests, missing blobs, dangling links, link loops,
an unreadable folder, split models, a projector, an adapter and a mixture of experts."""
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import gguf
import numpy as np
import pytest

from studygroup.cli import main
from studygroup.errors import ModelFileError
from studygroup.gguf import stores
from studygroup.gguf.architectures import ARCHITECTURES
from studygroup.gguf.config import size_text
from studygroup.gguf.container import read_gguf
from studygroup.model import model_names, packaged

STORE_VARS = ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "LLAMA_CACHE")


def write_gguf(path: Path, arch: str, metadata: dict, tensors: dict) -> Path:
    """A small GGUF file with these metadata (strings and whole numbers) and float32 tensors."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in metadata.items():
        (w.add_string if isinstance(value, str) else w.add_uint32)(key, value)
    for name, shape in tensors.items():
        w.add_tensor(name, np.zeros(shape, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def ollama_manifest(root: Path, parts: str, layers: list[tuple[str, Path | str]]) -> None:
    """manifests/<parts> naming each (mediaType, file) as blobs/sha256-<digest of the file>."""
    entries = []
    for media, source in layers:
        if isinstance(source, Path):
            digest = hashlib.sha256(source.read_bytes()).hexdigest()
            (root / "blobs").mkdir(parents=True, exist_ok=True)
            shutil.copy(source, root / "blobs" / f"sha256-{digest}")
        else:
            digest = source  # a blob that is not there
        entries.append({"mediaType": f"application/vnd.ollama.image.{media}", "digest": f"sha256:{digest}",
                        "size": 1})
    manifest = root / "manifests" / parts
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": entries}))


@pytest.fixture
def home(tmp_path, monkeypatch, tiny_model):
    """A home holding every store, and the tiny model's parameter count."""
    h, src = tmp_path / "home", tmp_path / "src"
    tiny = tiny_model.path
    projector = write_gguf(src / "proj.gguf", "clip", {"general.type": "mmproj"}, {"v.patch_embd.weight": (4, 32)})
    # Ollama: a model, a model with a projector, a namespaced one, a broken manifest, a missing blob
    ollama = h / ".ollama/models"
    ollama_manifest(ollama, "registry.ollama.ai/library/tiny/latest", [("model", tiny)])
    ollama_manifest(ollama, "registry.ollama.ai/library/seeing/1b", [("model", tiny), ("projector", projector)])
    ollama_manifest(ollama, "registry.ollama.ai/someone/ns-tiny/q4", [("model", tiny)])
    ollama_manifest(ollama, "registry.ollama.ai/library/gone/latest", [("model", "0" * 64)])
    (ollama / "manifests/registry.ollama.ai/library/broken").mkdir(parents=True)
    (ollama / "manifests/registry.ollama.ai/library/broken/latest").write_text("{not json")
    # LM Studio: a model, a projector, an adapter, a mixture of experts, an unknown family, loops
    lms = h / ".lmstudio/models/pub/repo"
    lms.mkdir(parents=True)
    shutil.copy(tiny, lms / "tiny-lms.gguf")
    shutil.copy(projector, lms / "mmproj-tiny-lms.gguf")
    write_gguf(lms / "lora-tiny.gguf", "llama", {"general.type": "adapter", "adapter.type": "lora"},
               {"blk.0.attn_q.weight.lora_a": (2, 32)})
    write_gguf(lms / "moe-tiny.gguf", "llama", {"llama.expert_count": 8, "llama.context_length": 64},
               {"blk.0.ffn_gate_exps.weight": (8, 4, 32)})
    write_gguf(lms / "mamba-tiny.gguf", "mamba", {}, {"token_embd.weight": (4, 32)})
    (lms / "loop").symlink_to("..")  # a folder that contains itself
    (lms / "a-loop.gguf").symlink_to("b-loop.gguf")
    (lms / "b-loop.gguf").symlink_to("a-loop.gguf")
    locked = h / ".lmstudio/models/locked"
    shutil.copy(tiny, (locked.mkdir(), locked / "locked-tiny.gguf")[1])
    locked.chmod(0)
    # Hugging Face: one blob reached from two revisions, and a link to a blob that is not there
    repo = h / ".cache/huggingface/hub/models--org--tiny-GGUF"
    (repo / "blobs").mkdir(parents=True)
    shutil.copy(tiny, repo / "blobs/abc123")
    for rev in ("rev1", "rev2"):
        (repo / "snapshots" / rev).mkdir(parents=True)
        (repo / "snapshots" / rev / "tiny-hf.gguf").symlink_to("../../blobs/abc123")
    (repo / "snapshots/rev1/lost-hf.gguf").symlink_to("../../blobs/nothing")
    # llama.cpp's cache (through $LLAMA_CACHE): a split model whole, and one missing a part
    cache = tmp_path / "llama-cache"
    for i in (1, 2):
        write_gguf(cache / f"big-0000{i}-of-00002.gguf", "llama", {"split.count": 2},
                   {f"blk.{i}.attn_q.weight": (3, 32)})
    shutil.copy(cache / "big-00001-of-00002.gguf", cache / "half-00001-of-00003.gguf")
    monkeypatch.setenv("HOME", str(h))
    for var in STORE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LLAMA_CACHE", str(cache))
    monkeypatch.setattr(stores, "OLLAMA_SERVICE", tmp_path / "no-service")
    yield h
    locked.chmod(0o755)


def listed(capsys) -> dict:
    assert main(["models", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    return data | {"by_name": {m["name"]: m for m in data["models"]}}


def tiny_parameters(tiny_model) -> int:
    return sum(t.numel() for t in tiny_model.hf_state_dict.values())


def test_every_store_is_listed_with_what_each_model_is(capsys, home, tiny_model):
    by_name = listed(capsys)["by_name"]
    for name, store in (("tiny:latest", "ollama"), ("seeing:1b", "ollama"), ("someone/ns-tiny:q4", "ollama"),
                        ("tiny-lms", "lm studio"), ("tiny-hf", "hugging face")):
        m = by_name[name]
        assert (m["store"], m["architecture"], m["readable"], m["reason"]) == (store, "llama", True, "")
        assert m["parameters"] == tiny_parameters(tiny_model)  # transformers' layout of the same weights
        assert m["context_length"] == tiny_model.hf_config["max_position_embeddings"]
        assert m["size"] == tiny_model.path.stat().st_size and m["quantization"] == "F32"
    assert by_name["tiny-hf"]["path"].endswith("snapshots/rev1/tiny-hf.gguf")  # one entry for two revisions
    assert [m["name"] for m in listed(capsys)["models"]].count("tiny-hf") == 1


def test_what_studygroup_cannot_read_is_listed_with_the_reason(capsys, home):
    by_name = listed(capsys)["by_name"]
    reasons = {
        "seeing:1b (projector)": "vision projector (mmproj)", "mmproj-tiny-lms": "vision projector (mmproj)",
        "lora-tiny": "LoRA adapter", "moe-tiny": "mixture of experts (8 experts per layer)",
        "mamba-tiny": "architecture 'mamba' is not one studygroup reads",
        "gone:latest": "blob sha256-" + "0" * 64 + " is missing", "broken:latest": "is not the JSON Ollama writes",
        "a-loop": "link that leads nowhere", "lost-hf": "link that leads nowhere",
        "big": "split into 2 files; studygroup reads one file", "half": "split into 3 files and part 2, 3 is missing",
    }
    for name, reason in reasons.items():
        assert by_name[name]["readable"] is False and reason in by_name[name]["reason"], name
    assert by_name["big"]["parameters"] == 2 * 3 * 32  # both parts' tensors


def test_readable_families_come_from_the_architectures_table(capsys, home, monkeypatch):
    monkeypatch.setattr("studygroup.gguf.summary.ARCHITECTURES", {**ARCHITECTURES, "mamba": None})
    monkeypatch.setattr("studygroup.gguf.summary.config_from_gguf", lambda fields, tensors=(): None)  # its metadata: not asked here
    assert listed(capsys)["by_name"]["mamba-tiny"]["readable"] is True


def test_what_the_metadata_refuses_is_listed_as_not_readable_with_the_reason(tmp_path):
    from studygroup.gguf.summary import summarize

    gemma = {"gemma3.block_count": 62, "gemma3.attention.head_count": 32, "gemma3.attention.head_count_kv": 16,
             "gemma3.embedding_length": 5376, "gemma3.feed_forward_length": 21504, "gemma3.context_length": 131072,
             "gemma3.attention.key_length": 128, "gemma3.attention.value_length": 128,
             "gemma3.attention.sliding_window": 1024, "gemma3.vocab_size": 262208}
    big = summarize((write_gguf(tmp_path / "gemma-27b.gguf", "gemma3", gemma, {"token_embd.weight": (4, 32)}),))
    assert not big.readable and big.reason.startswith("Gemma 3 27B scales its queries by 1/√(d_model/n_heads)")
    yarn = {"llama.block_count": 1, "llama.attention.head_count": 4, "llama.embedding_length": 32,
            "llama.feed_forward_length": 64, "llama.context_length": 64, "llama.vocab_size": 10,
            "llama.rope.scaling.type": "yarn"}
    s = summarize((write_gguf(tmp_path / "yarn.gguf", "llama", yarn, {"token_embd.weight": (4, 32)}),))
    assert not s.readable and "'yarn' RoPE scaling, which studygroup does not implement" in s.reason


def test_loops_and_unreadable_folders_are_skipped_with_the_reason(capsys, home):
    data = listed(capsys)
    loop = str(home / ".lmstudio/models/pub/repo/loop")
    assert any(s.startswith(loop) and "already walked" in s for s in data["skipped"])
    locked = home / ".lmstudio/models/locked"
    if os.access(locked, os.R_OK):  # root reads a folder whatever its mode: then it is listed
        assert data["by_name"]["locked-tiny"]["readable"] is True
    else:
        assert f"{locked}: Permission denied" in data["skipped"] and "locked-tiny" not in data["by_name"]


def test_text_listing_is_bounded_and_names_reasons(capsys, home):
    assert main(["models"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert err == "" and len(lines) <= 100 and max(map(len, lines)) <= 400
    assert lines[0].startswith("GGUF models on this disk") and "why not, and notes:" in out
    assert any(l.split()[:2] == ["tiny:latest", "ollama"] and l.split()[-1] == "yes" for l in lines)
    assert "  moe-tiny: a mixture of experts" in out


def test_listing_writes_nothing_in_the_stores(capsys, home, tmp_path):
    def state():
        return sorted((str(p), p.lstat().st_mtime_ns, p.lstat().st_size)
                      for p in tmp_path.rglob("*") if "locked" not in str(p) and ".cache/studygroup" not in str(p))
    before = state()
    listed(capsys)
    assert state() == before


def test_resolution_order(home, tmp_path, monkeypatch, tiny_model):
    ollama = home / ".ollama/models"
    blob = ollama / "blobs" / f"sha256-{hashlib.sha256(tiny_model.path.read_bytes()).hexdigest()}"
    # 1. an existing path wins over every name, even a packaged model's
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gemma-3-270m").write_bytes(b"")
    assert model_names.model_file("gemma-3-270m") == "gemma-3-270m"
    monkeypatch.chdir(home)
    # 2. ollama:NAME[:TAG], tag latest by default, any case
    assert model_names.model_file("ollama:tiny") == blob == model_names.model_file("ollama:TINY:latest")
    assert model_names.model_file("ollama:someone/ns-tiny:q4") == blob
    # 3. a packaged name, before any listed name
    monkeypatch.setattr(packaged, "model_file", lambda name: f"packaged {name}")
    assert model_names.model_file("Gemma-3-270M") == "packaged Gemma-3-270M"
    assert model_names.model_file("smollm2-135m") is None  # the default model
    # 4. a listed name: whole (any case), else the one name holding it
    assert Path(model_names.model_file("TINY-LMS")) == home / ".lmstudio/models/pub/repo/tiny-lms.gguf"
    assert Path(model_names.model_file("y-h")).name == "tiny-hf.gguf"
    assert model_names.model_file("SMOLLM2") is None and model_names.model_file("gemma-3") == "packaged gemma-3-270m"


@pytest.mark.parametrize("model, message", [
    ("tiny", "models match 'tiny': "), ("nothing-like-it", "no model file or known model is named 'nothing-like-it'"),
    ("ollama:nothing", "Ollama has no model 'nothing:latest' on this disk"),
    ("ollama:gone", "gone:latest (ollama) cannot be read: its blob sha256-"),
    ("ollama:broken", "is not the JSON Ollama writes"), ("mamba-tiny", None), ("big", "split into 2 files"),
    ("no/such.gguf", "model file no/such.gguf does not exist"),
])
def test_bad_names_exit_2_in_one_line(capsys, home, model, message):
    code = main(["explain", "the tin", "--model", model, "--measure-heads", "0"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("studygroup: error: ")
    assert (message or "architecture") in err


def test_explain_and_serve_take_listed_names(capsys, home, tiny_model, monkeypatch):
    code = main(["explain", "the tin", "--model", "ollama:tiny", "--json", "--measure-heads", "0"])
    assert code == 0 and json.loads(capsys.readouterr().out)["tokens"] == ["t", "he", "␣t", "in"]
    code = main(["serve", "--model", "nothing-like-it", "--port", "0"])
    assert code == 2 and "no model file or known model" in capsys.readouterr().err


def test_store_roots_follow_the_environment(tmp_path):
    for folder in ("om", "hf/hub", "hc", "lc"):
        (tmp_path / folder).mkdir(parents=True)
    env = {"OLLAMA_MODELS": str(tmp_path / "om"), "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_CACHE": str(tmp_path / "hc"), "LLAMA_CACHE": str(tmp_path / "lc")}
    found = stores.roots(tmp_path / "nohome", env)
    assert [(s, p.relative_to(tmp_path).as_posix()) for s, p in found if tmp_path in p.parents] == [
        ("ollama", "om"), ("hugging face", "hc"), ("hugging face", "hf/hub"), ("llama.cpp", "lc")]


def test_a_packaged_model_not_yet_joined_is_listed_with_its_facts(capsys, home, tmp_path, monkeypatch):
    monkeypatch.setenv("STUDYGROUP_CACHE_DIR", str(tmp_path / "fresh-cache"))  # nothing joined yet
    spec = packaged.PACKAGED["gemma-3-270m"]
    gemma = listed(capsys)["by_name"]["gemma-3-270m"]
    assert gemma["path"] == "" and gemma["reason"] == "joined from its packages on first use"
    assert (gemma["title"], gemma["architecture"], gemma["parameters"], gemma["quantization"],
            gemma["context_length"], gemma["size"]) == ("gemma-3 270M", "gemma3", 268_098_176, "Q4_K_M", 32_768, spec.size)
    assert gemma["tensor_types"] == dict(spec.tensor_types) and gemma["memory"] == spec.memory
    assert main(["models"]) == 0
    rows = {l.split()[0]: l for l in capsys.readouterr().out.splitlines() if l.split()[:1] and l.split()[0] in packaged.PACKAGED}
    assert "?" not in rows["gemma-3-270m"] and "268M" in rows["gemma-3-270m"]
    for name, row in rows.items():  # the memory the file's header gives, before it is joined
        assert "?" not in row and size_text(packaged.PACKAGED[name].memory) in row, row


def test_full_lists_each_models_file_and_tensor_types(capsys, home, tiny_model):
    assert main(["models"]) == 0
    plain = capsys.readouterr().out
    assert main(["models", "--full"]) == 0
    full = capsys.readouterr().out
    tiny = listed(capsys)["by_name"]["tiny-lms"]
    assert "files and tensor types:" in full and "files and tensor types:" not in plain
    types = ", ".join(f"{n} {name}" for name, n in tiny["tensor_types"].items())
    theirs = gguf.GGUFReader(str(tiny_model.path)).tensors  # gguf's own reader of the same file
    assert tiny["tensor_types"] == {"F32": len(theirs)} and {t.tensor_type.name for t in theirs} == {"F32"}
    assert f"  tiny-lms: {tiny['path']}; tensors: {types}" in full


# ---- what discovery never opens (issue 33, M1) ---------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def hostile_stores(tmp_path: Path, tiny: Path) -> dict:
    """A home whose stores hold a pipe named *.gguf (LM Studio), a pipe and a link to /dev/zero as
    Ollama manifests beside a good one, and a second Ollama store whose manifests are /proc/self:
    the environment a `studygroup` process takes them from."""
    h, other = tmp_path / "home", tmp_path / "ollama-models"
    lms = h / ".lmstudio/models/pub/repo"
    lms.mkdir(parents=True)
    os.mkfifo(lms / "pipe.gguf")
    ollama = h / ".ollama/models"
    ollama_manifest(ollama, "registry.ollama.ai/library/tiny/latest", [("model", tiny)])
    for name in ("other", "zero"):
        (ollama / "manifests/registry.ollama.ai/library" / name).mkdir(parents=True)
    os.mkfifo(ollama / "manifests/registry.ollama.ai/library/other/latest")
    (ollama / "manifests/registry.ollama.ai/library/zero/latest").symlink_to("/dev/zero")
    other.mkdir()
    (other / "manifests").symlink_to("/proc/self")
    env = {k: v for k, v in os.environ.items() if k not in STORE_VARS}
    return env | {"HOME": str(h), "OLLAMA_MODELS": str(other), "STUDYGROUP_CACHE_DIR": str(tmp_path / "cache")}


def studygroup_bounded(env: dict, *argv: str) -> subprocess.CompletedProcess:
    """The CLI in a process of its own, within 2 GiB and 60 s (a hang or a runaway read fails the test)."""
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # noqa: E731
    return subprocess.run([sys.executable, "-m", "studygroup.cli", *argv], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60, preexec_fn=limit)


def test_discovery_opens_only_regular_files_within_the_store(tmp_path, tiny_model):
    env = hostile_stores(tmp_path, tiny_model.path)
    done = studygroup_bounded(env, "models", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(done.stdout)
    by_name = {m["name"]: m for m in data["models"]}
    for name in ("pipe", "other:latest", "zero:latest"):
        assert not by_name[name]["readable"] and "not a regular file" in by_name[name]["reason"], name
    assert by_name["tiny:latest"]["readable"]
    manifests = tmp_path / "ollama-models/manifests"
    assert f"{manifests}: a link to a folder outside {manifests.parent} (not followed)" in data["skipped"]


def test_an_ollama_name_beside_a_pipe_manifest_is_one_line(tmp_path, tiny_model):
    env = hostile_stores(tmp_path, tiny_model.path)
    done = studygroup_bounded(env, "explain", "the tin", "--model", "ollama:other", "--measure-heads", "0")
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
    assert "other:latest (ollama) cannot be read: manifest: not a regular file" in done.stderr


def test_a_pipe_or_device_given_as_the_model_is_never_waited_on(tmp_path):
    os.mkfifo(tmp_path / "pipe.gguf")
    errors = {}

    def read(path):
        try:
            read_gguf(path)
        except ModelFileError as e:
            errors[path] = str(e)

    for path in (tmp_path / "pipe.gguf", Path("/dev/zero")):
        reader = threading.Thread(target=read, args=(path,), daemon=True)  # a wait on the pipe fails, not hangs
        reader.start()
        reader.join(20)
        assert errors.get(path) == f"{path} is not a regular file (a device, pipe or socket)"
