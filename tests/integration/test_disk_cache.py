"""The disk cache: warm loads skip the GGUF, changed files are re-read, crashes and corruption heal."""
from __future__ import annotations

import gc
import json
import os
import pwd
import random
import subprocess
import sys
import time
from pathlib import Path

import platformdirs
import pytest
import torch
from conftest import write_tiny_gguf
from safetensors.torch import save_file

from studygroup.model import cache_entry
from studygroup.model import disk_cache as cache
from studygroup.gguf import container as gguf_file
from studygroup.gguf import weights
from studygroup.gguf.tokenizer import Tokenizer
from studygroup.model.weights_cache import load_tokenizer
from studygroup.gguf.weights import read_weights
from studygroup.model.weights_cache import load_weights


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A cache folder of the test's own, so entries of other tests never interfere."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV_VAR, str(folder))
    return folder


@pytest.fixture
def model(tmp_path):
    return write_tiny_gguf(tmp_path / "m.gguf", seed=11)


@pytest.fixture
def parses(monkeypatch):
    """Counts GGUF parses made by weights and tokenizer."""
    calls = []
    for module in (weights, gguf_file):  # the tokenizer imports gguf_file.read_gguf when it parses
        real = module.read_gguf
        monkeypatch.setattr(module, "read_gguf", lambda path, real=real: calls.append(path) or real(path))
    return calls


def same(a, b):
    return a[0] == b[0] and a[1].keys() == b[1].keys() and all(torch.equal(a[1][k], b[1][k]) for k in a[1])


def entry(model, kind="weights"):
    return cache.entry_path(cache.file_key(model.path), kind)


def test_cache_dir_comes_from_the_environment_or_platformdirs(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    assert cache.cache_dir() == tmp_path
    monkeypatch.delenv(cache.ENV_VAR)
    assert str(cache.cache_dir()) == platformdirs.user_cache_dir("studygroup")


def test_the_suite_never_uses_the_users_cache(private_cache_dir):
    assert os.environ[cache.ENV_VAR] == str(private_cache_dir)


def test_the_suite_never_uses_the_users_home(private_cache_dir):
    """HOME and every folder found from it are the run's own, here and in a subprocess a test starts."""
    import matplotlib

    home = Path(os.environ["HOME"])
    assert home != Path(pwd.getpwuid(os.getuid()).pw_dir) and home.parent == private_cache_dir.parent
    for folder in (platformdirs.user_cache_dir("studygroup"), matplotlib.get_configdir(), matplotlib.get_cachedir()):
        assert Path(folder).is_relative_to(home), folder
    child = subprocess.run([sys.executable, "-c", "import os; print(os.environ['HOME'])"], capture_output=True,
                           text=True, check=True)
    assert child.stdout.strip() == str(home)


def test_second_load_reads_no_gguf(cache_dir, model, parses):
    cold = load_weights(model.path), load_tokenizer(model.path)
    assert len(parses) == 2 and entry(model).is_file() and entry(model, "tokenizer").is_file()
    warm = load_weights(model.path), load_tokenizer(model.path)
    assert len(parses) == 2  # no parse on a hit
    assert same(cold[0], warm[0]) and same(cold[0], read_weights(model.path))
    assert warm[1].encode("the 12 sing") == cold[1].encode("the 12 sing")
    assert warm[1].merges == cold[1].merges == Tokenizer.from_gguf(model.path).merges  # kept once, in the built one
    assert warm[1].tokens == cold[1].tokens and warm[1].token_types == cold[1].token_types
    assert not list(cache_dir.glob(".*.tmp"))  # no temporary file left behind


def test_cache_false_neither_reads_nor_writes(cache_dir, model, parses):
    load_weights(model.path, cache=False), load_tokenizer(model.path, cache=False)
    load_weights(model.path, cache=False)
    assert len(parses) == 3 and not cache_dir.exists()


@pytest.fixture
def hashes(monkeypatch):
    """Counts whole-file hashes made for cache keys."""
    calls = []
    real = cache.source_digest
    monkeypatch.setattr(cache, "source_digest", lambda path: calls.append(path) or real(path))
    return calls


def test_key_is_the_content_found_by_the_files_state(cache_dir, tmp_path, hashes):
    path = tmp_path / "f.gguf"
    path.write_bytes(b"GGUF" + b"\0" * (3 << 20))
    key = cache.file_key(path)
    assert cache.file_key(path) == key and len(hashes) == 1  # the same state: no hash
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert cache.file_key(path) == key and len(hashes) == 2  # touched: hashed again, the same content
    with open(path, "r+b") as f:  # past the first MiB, the size and mtime kept: only ctime tells
        f.seek(2 << 20)
        f.write(b"\1")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert cache.file_key(path) != key and len(hashes) == 3
    copy = tmp_path / "f.gguf.copy"
    copy.write_bytes(b"GGUF" + b"\0" * (3 << 20))
    assert cache.file_key(copy)[-16:] == key[-16:]  # another name, the same content digest


def test_the_content_digest_is_xxh3_of_the_whole_file(tmp_path):
    import xxhash

    path = tmp_path / "f.gguf"
    data = os.urandom((cache.READ_CHUNK * 2) + 12345)  # across chunk boundaries
    path.write_bytes(data)
    assert cache.source_digest(path) == xxhash.xxh3_128(data).hexdigest()


def test_changed_file_never_gets_old_weights(cache_dir, model, parses):
    old = load_weights(model.path)
    stat = model.path.stat()
    new_model = write_tiny_gguf(model.path, seed=12)  # same size, new numbers ...
    assert model.path.stat().st_size == stat.st_size
    os.utime(model.path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ... and even the same mtime
    new = load_weights(model.path)
    assert len(parses) == 2 and not torch.equal(new[1]["embed"], old[1]["embed"])
    assert torch.equal(new[1]["embed"], new_model.hf_state_dict["model.embed_tokens.weight"])


def test_touched_copied_or_renamed_file_adopts_its_entry(cache_dir, model, parses, hashes):
    first = load_weights(model.path)
    stat = model.path.stat()
    os.utime(model.path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert same(load_weights(model.path), first) and len(parses) == 1 and len(hashes) == 2
    renamed = model.path.with_name("renamed.gguf")
    renamed.write_bytes(model.path.read_bytes())
    assert same(load_weights(renamed), first) and len(parses) == 1  # adopted under the new name
    assert cache.entry_path(cache.file_key(renamed), "weights").is_file()


def test_half_written_temp_file_is_never_served(cache_dir, model, parses):
    """A crash while writing leaves only a temporary file; the next start must rebuild."""
    good = load_weights(model.path)
    final = entry(model)
    partial = final.with_name(f".{final.name}.crashed.tmp")
    partial.write_bytes(final.read_bytes()[: final.stat().st_size // 2])
    final.unlink()
    again = load_weights(model.path)
    assert len(parses) == 2 and same(good, again) and final.is_file()


def test_crash_during_write_leaves_no_entry(cache_dir, model, monkeypatch):
    def crash_halfway(path, buffer):
        def write(f):
            f.write(b"half of a safetensors file")
            raise KeyboardInterrupt  # the process dies mid-write
        cache._write_atomically(path, write)

    monkeypatch.setattr(cache, "write_tensors", crash_halfway)
    with pytest.raises(KeyboardInterrupt):
        load_weights(model.path)
    assert not entry(model).exists() and not list(cache_dir.glob(".*.tmp"))
    monkeypatch.undo()
    monkeypatch.setenv(cache.ENV_VAR, str(cache_dir))
    assert same(load_weights(model.path), read_weights(model.path))


def test_stale_temp_files_are_cleaned_up_fresh_ones_kept(cache_dir, model):
    cache_dir.mkdir()
    old, fresh = cache_dir / ".x.weights.safetensors.a.tmp", cache_dir / ".y.weights.safetensors.b.tmp"
    old.write_bytes(b"old"), fresh.write_bytes(b"fresh")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    load_weights(model.path)
    assert not old.exists() and fresh.exists()  # fresh: maybe another process is writing it


def test_a_dead_writers_temp_file_goes_a_live_ones_stays_and_counts(cache_dir, model):
    cache_dir.mkdir()
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout.strip()
    dead = cache_dir / f".m-0123456789abcdef.weights.safetensors.{dead_pid}.0badf00d.tmp"
    live = cache_dir / f".m-0123456789abcdef.weights.safetensors.{os.getpid()}.0badf00d.tmp"
    dead.write_bytes(b"x" * 1000), live.write_bytes(b"x" * 1000)
    load_weights(model.path)
    assert not dead.exists() and live.exists()
    stale = _entry(cache_dir, "s.q4-00000000000000aa", "weights", 10, 3600)
    written = sum(p.stat().st_size for p in cache_dir.iterdir() if p != live and p != stale)
    assert cache.prune(keep=cache.file_key(model.path), limit=written + 1000) == ["s.q4-00000000000000aa"]
    assert live.exists()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "wrong shapes", "no config", "flipped bytes",
                                    "a NaN in final_norm"])
def test_corrupt_weights_entry_is_rebuilt(cache_dir, model, parses, damage):
    load_weights(model.path)  # writes the entry; its memory-mapped tensors are dropped at once, since
    gc.collect()  # damaging a file in place under live mappings is what the cache itself never does
    expected = read_weights(model.path)
    final = entry(model)
    data = final.read_bytes()
    if damage == "garbage":
        final.write_bytes(os.urandom(len(data)))
    elif damage == "truncated":
        final.write_bytes(data[: len(data) - 100])
    elif damage == "empty":
        final.write_bytes(b"")
    elif damage == "wrong shapes":
        save_file({"embed": torch.zeros(3, 3)}, str(final), metadata={"config": '{"n_layers": 2}'})
    elif damage == "no config":
        save_file({k: v.contiguous() for k, v in expected[1].items()}, str(final))
    elif damage == "flipped bytes":  # 1,000 bytes anywhere past the header, at a fixed seed
        damaged = bytearray(data)
        for i in random.Random(0).sample(range(len(data) // 2, len(data)), 1000):
            damaged[i] ^= 0xFF
        final.write_bytes(bytes(damaged))
    else:  # a well-formed entry, its digest kept, one value changed
        mapped = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        at = cache_entry.unpack(mapped)[0]["final_norm"].data_ptr() - mapped.data_ptr()
        final.write_bytes(data[:at] + torch.tensor([float("nan")]).numpy().tobytes() + data[at + 4:])
    again = load_weights(model.path)
    assert len(parses) == 3 and same(expected, again)
    assert same(load_weights(model.path), expected) and len(parses) == 3  # the rebuilt entry serves


@pytest.mark.parametrize("damage", [b"{not json", b'{"format": "studygroup-tokenizer-1"}', b"[]",
                                    b'{"format": "studygroup-tokenizer-1", "tokens": ["a"], "merges": ["a b"],'
                                    b' "token_types": [1], "pre": "smollm", "bos_id": null, "eos_id": null,'
                                    b' "add_bos": false}'])
def test_corrupt_tokenizer_entry_is_rebuilt(cache_dir, model, parses, damage):
    expected = load_tokenizer(model.path).encode("the 12")
    entry(model, "tokenizer").write_bytes(damage)
    assert load_tokenizer(model.path).encode("the 12") == expected
    assert len(parses) == 2


def test_a_tokenizer_entry_with_two_tokens_swapped_is_rebuilt(cache_dir, model, capsys):
    expected = load_tokenizer(model.path).encode("the 12")
    path = entry(model, "tokenizer")
    digest, _, text = path.read_text(encoding="utf-8").partition("\n")
    value = json.loads(text)
    a, b = value["tokens"].index("Ġt"), value["tokens"].index("he")
    value["tokens"][a], value["tokens"][b] = value["tokens"][b], value["tokens"][a]
    path.write_text(digest + "\n" + json.dumps(value, ensure_ascii=False), encoding="utf-8")
    assert load_tokenizer(model.path).encode("the 12") == expected
    assert capsys.readouterr().err.count("is damaged") == 1


def test_a_damaged_weights_entry_says_so_in_one_line_and_gives_the_same_answer(cache_dir, model, capsys):
    from studygroup.model.model import load
    from studygroup.study.explain import explain

    before = explain(load(model.path), "the 12 sing").to_json()
    gc.collect()
    final = entry(model)
    data = bytearray(final.read_bytes())
    data[-5] ^= 0x40
    final.write_bytes(bytes(data))
    capsys.readouterr()
    after = explain(load(model.path), "the 12 sing").to_json()
    err = capsys.readouterr().err
    assert after == before and err.count("\n") == 1 and "is damaged" in err and final.name in err


def test_the_first_run_and_every_later_run_give_the_same_json(cache_dir, model):
    """Cold (dequantized now) and warm (mapped from the cache) compute on the same bytes."""
    from studygroup.model.model import load
    from studygroup.study.explain import explain

    cold = explain(load(model.path), "the 12 sing", measure_heads="all").to_json()
    assert entry(model).is_file()
    warm = explain(load(model.path), "the 12 sing", measure_heads="all").to_json()
    uncached = explain(load(model.path, cache=False), "the 12 sing", measure_heads="all").to_json()
    assert cold == warm == uncached


def test_unwritable_cache_warns_and_still_loads(tmp_path, monkeypatch, model):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(cache.ENV_VAR, str(blocker / "cache"))
    with pytest.warns(UserWarning, match="could not write its cache"):
        config, w = load_weights(model.path)
    assert config.n_layers == 2


def test_warm_load_is_fast(cache_dir, model):
    load_weights(model.path), load_tokenizer(model.path)
    start = time.perf_counter()
    load_weights(model.path), load_tokenizer(model.path)
    assert time.perf_counter() - start < 0.5


def test_a_cached_load_fuses_the_projections_without_a_copy(model):
    from studygroup.model.model import Model

    load_weights(model.path)  # fills the cache
    config, cached = load_weights(model.path)
    fresh = Model(config, read_weights(model.path)[1], tokenizer=None)
    mapped = Model(config, dict(cached), tokenizer=None)
    for l in range(config.n_layers):
        qkv, gate_up = mapped.w[f"layers.{l}.W_QKV"], mapped.w[f"layers.{l}.W_gate_up"]
        assert qkv.data_ptr() == cached[f"layers.{l}.W_Q"].data_ptr()  # the cache's own rows, joined in place
        assert gate_up.data_ptr() == cached[f"layers.{l}.W_gate"].data_ptr()
        assert torch.equal(qkv, fresh.w[f"layers.{l}.W_QKV"]) and torch.equal(gate_up, fresh.w[f"layers.{l}.W_gate_up"])
    ids = list(range(3, 30))
    assert torch.allclose(mapped.run(ids).logits, fresh.run(ids).logits, atol=1e-5)  # BLAS may round in another order


# ---- size bound ------------------------------------------------------------------------------
def _entry(cache_dir, key, kind, nbytes, age_s):
    """A fake entry of `nbytes`, last used `age_s` seconds ago."""
    path = cache.entry_path(key, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * nbytes)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_pruning_removes_whole_keys_least_recently_used_first(cache_dir):
    old = [_entry(cache_dir, "old.q4-0000000000000001", "weights", 600, 400), _entry(cache_dir, "old.q4-0000000000000001", "tokenizer", 100, 250)]
    mid = [_entry(cache_dir, "mid.q4-0000000000000002", "weights", 600, 500), _entry(cache_dir, "mid.q4-0000000000000002", "tokenizer", 100, 200)]
    new = _entry(cache_dir, "new.q4-0000000000000003", "weights", 600, 100)
    assert cache.prune(keep="new.q4-0000000000000003", limit=1400) == ["old.q4-0000000000000001"]  # a key was last used when its newest file was
    assert not any(p.exists() for p in old) and all(p.exists() for p in mid) and new.exists()
    mid = mid[0]
    assert cache.prune(keep="mid.q4-0000000000000002", limit=100) == ["new.q4-0000000000000003"]  # the key just written stays, even alone too big
    assert mid.exists() and cache.prune(keep="mid.q4-0000000000000002", limit=0) == []
    other = [cache_dir / "notes.json", cache_dir / "model.safetensors", cache_dir / ".x.weights.safetensors.tmp"]
    for p in other:  # files that are not entries are never touched
        p.write_bytes(b"y" * 1000)
    assert cache.prune(keep="mid.q4-0000000000000002", limit=0) == [] and all(p.exists() for p in other)


def test_a_hit_counts_as_a_use_and_a_write_prunes_to_the_bound(cache_dir, model, monkeypatch):
    stale = _entry(cache_dir, "m.q4-00000000000000ff", "weights", 10_000, 3600)
    load_weights(model.path)  # miss: writes this model's entry, within the default bound
    assert stale.exists() and entry(model).exists()
    then = time.time() - 7200
    os.utime(entry(model), (then, then))
    load_weights(model.path)  # a hit refreshes the entry's time
    assert entry(model).stat().st_mtime > time.time() - 60
    monkeypatch.setenv(cache.MAX_GB_ENV_VAR, str(entry(model).stat().st_size / 2**30))
    load_tokenizer(model.path)  # a write: over the bound, the stale key goes, this model's stay
    assert not stale.exists() and entry(model).exists() and entry(model, "tokenizer").exists()


def test_a_bad_size_bound_warns_and_falls_back(monkeypatch):
    monkeypatch.setenv(cache.MAX_GB_ENV_VAR, "lots")
    with pytest.warns(UserWarning, match="not a number"):
        assert cache.max_bytes() == int(cache.DEFAULT_MAX_GB * 2**30)
    monkeypatch.setenv(cache.MAX_GB_ENV_VAR, "0.5")
    assert cache.max_bytes() == 2**29


def test_a_first_load_says_so_at_a_terminal_only(cache_dir, model, monkeypatch, capsys):
    import io

    from studygroup import progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    load_weights(model.path)  # not a terminal (the test's stderr): silent
    assert capsys.readouterr().err == ""
    for f in cache_dir.glob("*.weights.safetensors"):
        f.unlink()
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    load_weights(model.path)  # a miss at a terminal: one line
    assert terminal.getvalue().count("\n") == 1 and "first use of" in terminal.getvalue()
    load_weights(model.path)  # a hit: nothing more
    assert terminal.getvalue().count("\n") == 1
    monkeypatch.setattr(progress, "_shown", False)  # `studygroup serve`: its console is a log
    for f in cache_dir.glob("*.weights.safetensors"):
        f.unlink()
    load_weights(model.path)
    assert terminal.getvalue().count("\n") == 1


def test_an_entry_whose_config_does_not_say_tied_takes_it_from_its_weights(cache_dir, tmp_path, monkeypatch, parses):
    """An entry written before the config said whether the unembedding is a matrix of its own."""
    from studygroup.gguf.config import Config

    untied = write_tiny_gguf(tmp_path / "u.gguf", untied=True)
    real = Config.to_dict
    monkeypatch.setattr(Config, "to_dict", lambda c: {k: v for k, v in real(c).items() if k != "tied"})
    assert load_weights(untied.path)[0].tied is False  # from the file
    monkeypatch.setattr(Config, "to_dict", real)
    config, w = load_weights(untied.path)
    assert len(parses) == 1 and "unembed" in w and config.tied is False  # from the entry
