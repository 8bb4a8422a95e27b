"""`survey`: the roles of every head (the definitions of `roles`, one module computing both) over
a corpus cut into sequences, shard by shard into Parquet files, then summarized with intervals.

Each shard is scored by a worker (a process of the local pool, or a Ray actor) and written by this
process, the driver, as soon as it comes back; a rerun with the same arguments scores only the
shards without a file, so a survey killed at any moment loses at most the shards being scored.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow.parquet as pq

from studygroup.errors import InputError
from studygroup.progress import ShardProgress
from studygroup.study.survey import shards as store
from studygroup.study.survey.corpus import corpus as cut_corpus
from studygroup.study.survey.summary import Survey, summary_table, survey_result
from studygroup.study.survey.workers import Shard, fault_from_env, run_local

SHARD_SIZE = 10
SUMMARY = "summary.parquet"


def survey(out, files=(), corpus: str | None = None, n: int | None = None, tokens: int = 64, model=None,
           ray: str | None = None, workers: int | None = None, shard_size: int = SHARD_SIZE, seed: int = 0,
           threads: int = 1) -> Survey:
    """Every head's role scores on each sequence of a corpus (`corpus` "probe" or "pydoc", or text
    `files`), written to the folder `out`, and their summary.

    ray: None for the local pool of `workers` processes (default: one per core); "local" to start
    a Ray on this machine (with `workers` CPUs, default one per core); "auto" or "HOST:PORT" to join
    a running Ray cluster (one worker per CPU it has). threads: each local worker's torch threads
    (Ray's workers use one each).

    >>> s = survey("s", corpus="probe", n=2, tokens=16, workers=1)
    >>> s.sequences, s.top("induction", 1)[0].n
    (2, 2)
    """
    from studygroup.model.disk_cache import file_key
    from studygroup.model.model import load

    check_runner(ray, workers, shard_size, threads)
    m = model if hasattr(model, "config") else load(model)
    path = str(model_file(m))
    c = cut_corpus(m, corpus, files, tokens, n, seed)
    plan = store.Plan(store.FORMAT, Path(path).name, file_sha256(path), c.name, c.description, c.sha256,
                      len(c.sequences), tokens, shard_size, m.config.n_layers, m.config.n_heads, seed)
    work = (path, file_key(path), fault_from_env())
    if ray is None:
        _score(out, plan, c, lambda todo: run_local(todo, *work, workers or _cores(), threads))
    else:
        from studygroup.study.survey.ray_runner import connected, run_ray

        with connected(None if ray == "local" else ray, workers or _cores()) as r:  # joined before anything is written
            _score(out, plan, c, lambda todo: run_ray(r, todo, *work))
    return summarize(out, plan)


def check_runner(ray, workers, shard_size, threads=1) -> None:
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise InputError(f"workers={workers}: give at least 1 worker process")
    if not isinstance(shard_size, int) or shard_size < 1:
        raise InputError(f"shard_size={shard_size}: give at least 1 sequence per shard")
    if not isinstance(threads, int) or threads < 1 or (ray is not None and threads != 1):
        raise InputError(f"threads={threads}: give at least 1 thread per local worker (a Ray worker uses one)")
    if ray not in (None, "local") and workers is not None:
        raise InputError("--workers sets the processes on this machine: a Ray cluster runs one worker per CPU it has")


def _score(out, plan: store.Plan, c, run) -> None:
    """Score and write every shard of `plan` without a file in `out`."""
    store.open_folder(out, plan)
    todo = store.missing_shards(out, plan)
    bar = ShardProgress(plan.shards, plan.shards - len(todo), sum(len(plan.shard_range(k)) for k in todo))
    try:
        for scored in run([Shard(k, c.sequences[plan.shard_range(k).start:plan.shard_range(k).stop]) for k in todo]):
            store.write_shard(out, plan, scored.k, scored.scores, scored.where)
            bar.advance(len(scored.scores))
    finally:
        bar.close()


def summarize(out, plan: store.Plan) -> Survey:
    """Write summary.parquet from the shards of a finished survey, and return its Survey."""
    table = summary_table(store.shard_scores(out, plan), plan.roles, plan.seed)
    store.write_table(Path(out) / SUMMARY, table)
    return survey_result(out, plan, table)


def load_survey(folder) -> Survey:
    """The Survey a finished survey folder holds; InputError where it holds none (or an unfinished one).

    >>> load_survey("nowhere")
    Traceback (most recent call last):
    studygroup.errors.InputError: nowhere holds no survey (no readable survey.json): give a folder `studygroup survey --out` wrote
    """
    plan = store.read_plan(folder)
    summary = Path(folder) / SUMMARY
    if not summary.is_file():
        raise InputError(f"{folder} holds an unfinished survey (no {SUMMARY}): run the same survey again to finish it")
    return survey_result(folder, plan, pq.read_table(summary))


def check_surveyed(s: Survey, model_sha256: str, model_name: str) -> None:
    """InputError (one line) unless the survey `s` surveyed the model file whose SHA-256 is given.

    >>> s = Survey("s", "m.gguf", "ab" * 32, "probe", "2 probe sequences", 2, 64, 0.5, {}, [])
    >>> check_surveyed(s, "0" * 64, "other.gguf")
    Traceback (most recent call last):
    studygroup.errors.InputError: s surveyed m.gguf (sha256 abababababababab…), not other.gguf (sha256 0000000000000000…): survey this model, or serve that one (--model)
    """
    if s.model_sha256 != model_sha256:
        raise InputError(f"{s.folder} surveyed {s.model} (sha256 {s.model_sha256[:16]}…), not {model_name} "
                         f"(sha256 {model_sha256[:16]}…): survey this model, or serve that one (--model)")


def model_file(model) -> Path:
    """The GGUF file a loaded model was read from (its absolute path)."""
    from studygroup.gguf.model_path import resolve_model_path

    return resolve_model_path(model.path).resolve()


def file_sha256(path) -> str:
    """SHA-256 of a file's content, read in 8 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(1 << 23):
            h.update(chunk)
    return h.hexdigest()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
