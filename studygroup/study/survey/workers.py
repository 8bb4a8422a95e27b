"""Who scores a survey's shards. A ShardWorker loads the model once (its weights mapped from the
disk cache, so workers on one machine share the same pages through the page cache) and scores
one shard at a time with one thread, several of its sequences in one pass; the local pool runs
one worker process per core, Ray one actor per CPU of the cluster (see ray_runner.py). Both call the same `ShardWorker.score`, so their
numbers are the same bit for bit on the same machine.

Test hook: STUDYGROUP_SURVEY_FAULT=K:FILE (read by the driver, handed to its workers) makes the
worker that scores shard K exit in the middle of it, once: the first to find FILE absent creates
it and dies after the shard's first pass (before the shard is done).
"""
from __future__ import annotations

import os
import socket
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch

from studygroup.errors import StudyGroupError
from studygroup.study.roles import ROLES, batch_layer_roles, batch_size, layer_roles
from studygroup.study.survey.shards import SCORED

FAULT_VARIABLE = "STUDYGROUP_SURVEY_FAULT"
#: How often a shard is handed out again after its worker died before the survey gives up.
RETRIES = 3


@dataclass(frozen=True)
class Shard:
    """What goes to a worker: the shard's number and its sequences' token ids (S, tokens)."""

    k: int
    ids: np.ndarray


@dataclass(frozen=True)
class Scored:
    """What comes back: the shard's scores (S, n_layers, n_heads, roles) and where they were made."""

    k: int
    scores: np.ndarray
    where: dict


class ShardWorker:
    """Loads the model file once; `score(shard)` returns its Scored. model_key: the driver's
    `disk_cache.file_key` of the file, which this machine's copy must match."""

    def __init__(self, model_path: str, model_key: str, fault: str | None = None, threads: int = 1):
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # threads that wait sleep, leaving the core to other workers
        from studygroup.model.disk_cache import file_key
        from studygroup.model.model import load

        torch.set_num_threads(threads)
        if not Path(model_path).is_file() or file_key(model_path) != model_key:
            raise SurveyWorkerError(f"{socket.gethostname()} has no copy of the model at {model_path} "
                                    "(or another file there): every machine needs the same model file at that path")
        self.model, self.fault = load(model_path), fault

    def score(self, shard: Shard) -> Scored:
        """The shard's scores, up to `batch_size` sequences a pass (one at a time, its maps
        computed layer by layer, where one sequence's maps exceed a batch's memory)."""
        S, T = shard.ids.shape
        B = batch_size(self.model.config, T)
        out = np.empty((S, self.model.config.n_layers, self.model.config.n_heads, len(SCORED)))  # roles, then `first`
        for s in range(0, S, max(B, 1)):
            batch = shard.ids[s:s + max(B, 1)]
            out[s:s + len(batch)] = self._batch(batch) if B else self._alone(batch[0].tolist())
            self._maybe_die(shard.k)
        return Scored(shard.k, out, _where())

    def _batch(self, ids: np.ndarray) -> np.ndarray:
        scores, first = batch_layer_roles(self.model, torch.from_numpy(ids))  # (B, L, H, 6), (B, L, H)
        return torch.cat([scores, first[..., None]], -1).numpy()  # (B, L, H, 7)

    def _alone(self, ids: list[int]) -> np.ndarray:
        L, H = self.model.config.n_layers, self.model.config.n_heads
        out = np.empty((1, L, H, len(SCORED)))
        for layer, scores, first in layer_roles(self.model, ids):
            out[0, layer, :, :-1] = [[getattr(x, r) for r in ROLES] for x in scores]
            out[0, layer, :, -1] = first.numpy()
        return out

    def _maybe_die(self, k: int) -> None:
        if self.fault is None:
            return
        shard, _, marker = self.fault.partition(":")
        if int(shard) == k and not os.path.exists(marker):
            Path(marker).touch()
            os._exit(1)


class SurveyWorkerError(StudyGroupError):
    """A worker could not start or keep going (no model file there; died too often)."""


def _where() -> dict:
    node = os.environ.get("RAY_NODE_ID") or _ray_node()
    return {"host": socket.gethostname(), "pid": str(os.getpid()), "node": node or "local"}


def _ray_node() -> str | None:
    import sys

    if "ray" not in sys.modules:
        return None
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def fault_from_env() -> str | None:
    return os.environ.get(FAULT_VARIABLE) or None


# The local pool: one ShardWorker per process, made by the pool's initializer.
_worker: ShardWorker | None = None


def _start(model_path: str, model_key: str, fault: str | None, threads: int) -> None:
    global _worker
    _worker = ShardWorker(model_path, model_key, fault, threads)


def _score(shard: Shard) -> Scored:
    return _worker.score(shard)


def run_local(shards: list[Shard], model_path: str, model_key: str, fault: str | None, workers: int, threads: int = 1):
    """Score `shards` on `workers` processes of `threads` threads each; yields each Scored as it is done. A pool whose worker
    died after scoring shards is started again for the shards not yet done (RETRIES times at most);
    one that scored none is not (its workers cannot start)."""
    todo = {s.k: s for s in shards}
    if not todo:
        return
    for _ in range(RETRIES + 1):
        before = len(todo)
        try:
            yield from _pool(list(todo.values()), (model_path, model_key, fault, threads), workers, todo)
            return
        except BrokenProcessPool:
            if len(todo) == before:
                raise SurveyWorkerError(NO_START) from None
    raise SurveyWorkerError(f"the survey's workers died {RETRIES + 1} times: shards {sorted(todo)[:5]} were not scored")


NO_START = ("the survey's worker processes stopped before scoring a shard (in a script, call survey() under "
            "`if __name__ == \"__main__\":`: its workers start by importing the script)")


def _pool(shards, start: tuple, workers: int, todo: dict):
    ctx = get_context("spawn")  # no fork of a process whose torch threads run
    with ProcessPoolExecutor(min(workers, len(shards)), ctx, _start, start) as pool:
        pending = {pool.submit(_score, s) for s in shards}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                scored = f.result()
                todo.pop(scored.k, None)
                yield scored
