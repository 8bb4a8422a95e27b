"""A survey's folder: survey.json (what was surveyed), shards/shard-NNNNN.parquet (one per shard,
each written whole or not at all) and summary.parquet. See docs/survey.md for the columns.

Shard k holds sequences k·size … (k+1)·size − 1: the same arguments give the same shards, so a
rerun scores only the shards whose file is missing, and a shard's file is either absent or
complete (written to a temporary file in the same folder, then renamed over its name).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from studygroup.errors import InputError
from studygroup.study.roles import ROLES

#: What a shard's rows score: the six roles of `roles`, then each head's mean weight on member 0.
SCORED = (*ROLES, "first")
FORMAT = "studygroup-survey-1"
ROW_SCHEMA = pa.schema([("model_sha256", pa.string()), ("corpus_sha256", pa.string()), ("shard", pa.int32()),
                        ("seq", pa.int32()), ("layer", pa.int16()), ("head", pa.int16()),
                        ("role", pa.dictionary(pa.int8(), pa.string())), ("score", pa.float64()), ("tokens", pa.int32())])


@dataclass(frozen=True)
class Plan:
    """What a survey folder holds: written to survey.json before the first shard, compared on a rerun."""

    format: str
    model: str  # the model file's name (its path may differ between machines)
    model_sha256: str
    corpus_name: str  # "probe", "pydoc" or "files"
    corpus: str  # one line: what the sequences are
    corpus_sha256: str
    sequences: int
    tokens: int
    shard_size: int
    n_layers: int
    n_heads: int
    seed: int  # the bootstrap's
    roles: tuple[str, ...] = SCORED

    @property
    def shards(self) -> int:
        return -(-self.sequences // self.shard_size)

    def shard_range(self, k: int) -> range:
        """The sequences of shard k."""
        return range(k * self.shard_size, min(self.sequences, (k + 1) * self.shard_size))


def shard_path(out: Path, k: int) -> Path:
    return Path(out) / "shards" / f"shard-{k:05d}.parquet"


def open_folder(out: Path, plan: Plan) -> None:
    """Make `out` hold `plan`'s survey: write survey.json, or check the one there is the same.
    InputError when it holds another survey (or other files) or is not a folder."""
    out = Path(out)
    manifest = out / "survey.json"
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} is a file: give --out a folder (new, or one a survey with the same arguments wrote)")
    if manifest.is_file():
        return _check_same(out, manifest, plan)
    if out.is_dir() and any(out.iterdir()):
        raise InputError(f"{out} holds other files and no survey.json: give --out a new folder")
    (out / "shards").mkdir(parents=True, exist_ok=True)
    _write_atomic(manifest, lambda f: f.write(json.dumps(asdict(plan), indent=2).encode()))


def _check_same(out: Path, manifest: Path, plan: Plan) -> None:
    try:
        there = json.loads(manifest.read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{manifest} cannot be read ({e}): give --out a new folder") from None
    mine = json.loads(json.dumps(asdict(plan)))
    differ = [k for k in mine if there.get(k) != mine[k]]
    if differ:
        k = differ[0]
        raise InputError(f"{out} holds a survey with other arguments ({k} {there.get(k)!r}, not {mine[k]!r}): "
                         "give the same arguments to resume it, or another --out")
    (out / "shards").mkdir(exist_ok=True)


def read_plan(out: Path) -> Plan:
    """The plan of a finished or running survey folder; InputError where there is none."""
    manifest = Path(out) / "survey.json"
    try:
        there = json.loads(manifest.read_text())
        return Plan(**{**there, "roles": tuple(there["roles"])})
    except (OSError, ValueError, TypeError, KeyError):
        raise InputError(f"{out} holds no survey (no readable survey.json): give a folder `studygroup survey --out` wrote") from None


def missing_shards(out: Path, plan: Plan) -> list[int]:
    """The shards without a file, in order; leftover temporary files of a killed run are removed."""
    for leftover in (Path(out) / "shards").glob(".*.tmp"):
        leftover.unlink(missing_ok=True)
    return [k for k in range(plan.shards) if not shard_path(out, k).exists()]


def shard_table(plan: Plan, k: int, scores: np.ndarray) -> pa.Table:
    """Shard k's rows from its scores (S, n_layers, n_heads, roles): one row per sequence, layer,
    head and role, in that order."""
    S, L, H, R = scores.shape
    seq, layer, head, role = (a.ravel() for a in np.meshgrid(
        np.asarray(plan.shard_range(k)), np.arange(L), np.arange(H), np.arange(R), indexing="ij"))
    n = seq.size
    return pa.table({
        "model_sha256": pa.array([plan.model_sha256] * n, pa.string()),
        "corpus_sha256": pa.array([plan.corpus_sha256] * n, pa.string()),
        "shard": pa.array(np.full(n, k, np.int32)),
        "seq": pa.array(seq.astype(np.int32)), "layer": pa.array(layer.astype(np.int16)),
        "head": pa.array(head.astype(np.int16)),
        "role": pa.DictionaryArray.from_arrays(pa.array(role.astype(np.int8)), pa.array(list(plan.roles))),
        "score": pa.array(scores.reshape(-1)), "tokens": pa.array(np.full(n, plan.tokens, np.int32)),
    }, schema=ROW_SCHEMA)


def write_shard(out: Path, plan: Plan, k: int, scores: np.ndarray, where: dict[str, str]) -> Path:
    """Shard k's Parquet file, whole or not at all; `where` (the node and process that scored it)
    goes into the file's metadata, not its rows."""
    table = shard_table(plan, k, scores)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **{f"studygroup.{a}": b for a, b in where.items()}})
    return _write_atomic(shard_path(out, k), lambda f: pq.write_table(table, f))


def write_table(path: Path, table: pa.Table) -> Path:
    """A Parquet file, whole or not at all."""
    return _write_atomic(Path(path), lambda f: pq.write_table(table, f))


def _write_atomic(path: Path, write) -> Path:
    """write(file) into a temporary file beside `path`, flushed to disk, then renamed over `path`."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_rows(out: Path) -> pa.Table:
    """Every shard's rows, in shard order."""
    files = sorted((Path(out) / "shards").glob("shard-*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]) if files else ROW_SCHEMA.empty_table()


def shard_scores(out: Path, plan: Plan) -> np.ndarray:
    """Every sequence's scores from the shard files: (sequences, n_layers, n_heads, roles) float64."""
    L, H, R = plan.n_layers, plan.n_heads, len(plan.roles)
    parts = [pq.read_table(shard_path(out, k), columns=["score"])["score"].to_numpy() for k in range(plan.shards)]
    return np.concatenate(parts).reshape(plan.sequences, L, H, R)
