"""The same shards on Ray (Ray Core): one ShardWorker actor per CPU of the cluster, spread over
its nodes, fed by an ActorPool. What crosses the network is a shard (its number and its sequences'
token ids, 8 bytes each) going out and its scores coming back (8 bytes per row): never weights,
so every node needs the model file, at the same path.

An actor that dies (its process killed, its node lost) is started again by Ray, which hands it
the shard it was scoring again (max_restarts, max_task_retries): the shard is scored once more,
and its rows are written once, by the driver.
"""
from __future__ import annotations

import os
import socket
from contextlib import contextmanager

from studygroup.errors import InputError
from studygroup.study.survey.workers import RETRIES, ShardWorker, SurveyWorkerError

#: How long the driver waits for an address to answer before saying nothing listens there.
CONNECT_TIMEOUT_S = 5
#: Ray reads it when imported: "0" gives its nodes the loopback address (no multi-node cluster).
LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextmanager
def connected(address: str | None, cpus: int = 1):
    """Ray, started here on this machine with `cpus` CPUs (address None; stopped at the end) or joined at `address`
    ("auto": the cluster this machine belongs to; HOST:PORT: its head's GCS). InputError when Ray is
    not installed, nothing listens at the address, or Ray cannot join it."""
    if address is None:  # Ray's own switch: a single-machine Ray on the loopback address, not the network's
        os.environ.setdefault(LOOPBACK_ONLY, "0")
    ray = _ray()
    if address is not None and address != "auto":
        _check_listening(address)
    try:
        if address is None:  # a local Ray on loopback
            ray.init(address="local", num_cpus=cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
                     logging_level="ERROR", log_to_driver=False)
        else:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise InputError(f"--ray {address}: Ray cannot join a cluster there ({' '.join(str(e).split())[:200]}): "
                         "start one with `ray start --head`, or give --ray alone for a local one") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def _ray():
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs Ray: pip install 'studygroup[ray]'") from None
    return ray


def _check_listening(address: str) -> None:
    """InputError unless something accepts a connection at HOST:PORT (ray://HOST:PORT too) within seconds."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--ray {address}: give HOST:PORT (the head's address, e.g. 127.0.0.1:6379), auto, or nothing")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise InputError(f"--ray {address}: nothing listens there ({e.strerror or e}): start the head with "
                         f"`ray start --head --port={port}`, or give --ray alone for a local Ray") from None


def run_ray(ray, shards, model_path: str, model_key: str, fault: str | None):
    """Score `shards` on one actor per CPU of the cluster; yields each Scored as it is done."""
    from ray.util import ActorPool

    Worker = ray.remote(num_cpus=1, max_restarts=RETRIES, max_task_retries=RETRIES,
                        scheduling_strategy="SPREAD")(ShardWorker)
    n = max(1, min(int(ray.cluster_resources().get("CPU", 1)), len(shards)))
    actors = [Worker.remote(model_path, model_key, fault) for _ in range(n)]
    try:
        for scored in ActorPool(actors).map_unordered(lambda a, s: a.score.remote(s), shards):
            yield scored
    except ray.exceptions.RayActorError as e:
        raise SurveyWorkerError(f"a Ray worker could not go on: {' '.join(str(e).split())[:300]}") from None
    finally:
        for a in actors:
            ray.kill(a)
