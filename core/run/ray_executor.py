"""The ``ray`` executor: each host's paired block is one Ray task on that host's node (docs/ray.md).

Imported only for ``--executor ray``. The task is a streaming generator (core/run/block.py): it reserves no CPU
and no GPU (the engine owns the node's devices; Ray is told not to touch ``CUDA_VISIBLE_DEVICES``), is pinned
to its node by the host's custom resources or IP, and is never retried elsewhere. The driver lands every
sample through the run directory's single write path as it arrives, so a lost node costs only its
unfinished points, which ``--resume`` measures again.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray

from ..common.errors import ConfigError, DuplicateSampleError
from ..config.placement import Block, blocks_of, placement_record
from ..measure.points import DoneKeys
from ..results.record import ArmAttempt
from ..results.sample import Sample
from ..results.store import RunDir
from .block import APPENDED, Message, run_block
from .events import RunEvents
from .plan import Plan

__all__ = ["RayExecutor"]

_TASK_ENV = {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}  # the engine picks its GPUs, not Ray


class RayExecutor:
    """Run each block of ``hosts:`` on its Ray node; ``address`` as for ``ray.init`` (None: $RAY_ADDRESS or
    a Ray instance on this machine)."""

    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        self.address = address
        self.failed_hosts: dict[str, str] = {}

    def run(self, plan: Plan, run: RunDir, events: RunEvents, done: DoneKeys) -> None:
        config = plan.config
        if not config.hosts:
            raise ConfigError("--executor ray: the file has no hosts: section saying which node runs which "
                              "block (docs/ray.md)")
        names = [a.arm.name for a in plan.arms]
        blocks = blocks_of(config.hosts, names, config.baseline_arm)
        record = placement_record(blocks, names)
        first = next(b.baseline for b in blocks if b.baseline)
        run.update_record(placement=record, baseline=first, executor="ray")
        started_here = not ray.is_initialized()
        if started_here:
            with _loopback_kept(self.address):
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.WARNING, configure_logging=False)
        hosts: dict[str, Any] = {k: v.model_dump(mode="json", exclude_unset=True)
                                 for k, v in run.read_record().hosts.items()}
        lock = threading.Lock()
        try:
            payload = {"config": config.model_dump(mode="json"), "orders": plan.orders, "run_id": run.run_id,
                       "meta": run.read_record().to_json()}
            streams = []
            for block in blocks:
                mine = [list(k) for k in done if k[0] in block.stored.values()]
                task = ray.remote(_block_on_node).options(**_task_options(block))
                streams.append((block, task.remote({**payload, "host": block.host.name, "done": mine})))
            threads = [threading.Thread(target=self._drain, args=(block, stream, run, events, hosts, lock),
                                        name=f"bakeoff-drain-{block.host.name}", daemon=True)
                       for block, stream in streams]
            for t in threads:
                t.start()
            try:
                while any(t.is_alive() for t in threads):
                    for t in threads:
                        t.join(timeout=0.5)  # short waits: Ctrl-C reaches this thread
            except BaseException:
                for _, stream in streams:  # the task stops its engine (process group) on the way out
                    with contextlib.suppress(Exception):  # an already finished or lost task
                        ray.cancel(stream)
                for t in threads:
                    t.join(timeout=60)
                raise
        finally:
            with lock:
                run.update_record(hosts=hosts, finished_at=time.time(), arm_records=run.arm_records())
            if started_here:
                ray.shutdown()

    def _drain(self, block: Block, stream: Any, run: RunDir, events: RunEvents, hosts: dict[str, Any],
               lock: threading.Lock) -> None:
        """Land one block's messages as they arrive; a lost node or task ends the block, not the run."""
        name = block.host.name
        try:
            for ref in stream:
                message: Message = ray.get(ref)
                with lock:
                    self._land(block, message, run, events, hosts)
        except ray.exceptions.RayError as exc:
            why = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            with lock:
                self.failed_hosts[name] = why
                hosts.setdefault(name, {})["lost"] = why
                events.on_warning(f"host {name}: its block stopped ({type(exc).__name__}: {why}); its finished "
                                  f"samples are stored; `bakeoff run --resume {run.path}` measures the rest")

    def _land(self, block: Block, message: Message, run: RunDir, events: RunEvents,
              hosts: dict[str, Any]) -> None:
        kind, name = message[0], block.host.name
        if kind == "sample":
            sample = Sample.model_validate_json(message[1])
            try:
                stored = run.append(sample)
            except DuplicateSampleError:
                events.on_warning(f"host {name}: a second sample for {sample.arm}/{sample.prompt} pass "
                                  f"{sample.pass_index} was not stored")
                return
            events.on_sample(stored)
        elif kind == "record":
            arm = message[1]
            attempt = ArmAttempt.model_validate({**message[2], "host": name})
            run.append_attempt(arm, attempt)
            engines = hosts.setdefault(name, {}).setdefault("engines", {})
            if attempt.version:
                engines[arm] = attempt.version
            if attempt.failed:
                events.on_arm_failed(arm, str(attempt.error))
        elif kind == "file":
            _land_file(run.path, message[1], message[2], message[3])
        elif kind == "host":
            hosts.setdefault(name, {}).update(message[1], node=block.host.model_dump(exclude_none=True))
        elif kind == "warning":
            events.on_warning(str(message[1]))
        elif kind == "end" and message[1]:
            self.failed_hosts[name] = str(message[1]).splitlines()[0]
            events.on_warning(f"host {name}: its block failed: {message[1]}")


@contextlib.contextmanager
def _loopback_kept(address: str | None) -> Iterator[None]:
    """Inside: a cluster on this machine's loopback (or a Ray instance started here) stays on 127.0.0.1.

    ``ray.init`` rewrites a loopback address, and its own node address, to the machine's interface address
    (so that other machines could reach it): the driver then dials a head bound to 127.0.0.1 at an address it
    does not listen on, and a Ray instance it starts listens on every interface. Ray keeps loopback where it
    runs without clusters (its ``ENABLE_RAY_CLUSTER`` switch, read when an address is resolved); it is off
    only for such an address, so a driver joining a cluster of other machines still uses the interface.
    """
    if address and address.startswith("ray://"):  # the Ray client: this process is no node of the cluster
        yield
        return
    from ray._private import ray_constants, services  # no public switch: ray.init's own address rules

    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        target = services.canonicalize_bootstrap_address(address)  # None: ray.init starts an instance here
        if target is not None and not _is_loopback(target.rsplit(":", 1)[0].strip("[]")):
            ray_constants.ENABLE_RAY_CLUSTER = before
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _block_on_node(payload: dict[str, Any]) -> Iterator[Message]:
    """The Ray task: which node this is, then the block's own messages (core/run/block.py)."""
    context = ray.get_runtime_context()
    node_ip = ray.util.get_node_ip_address()
    yield ("host", {"ray_node_id": context.get_node_id(), "node_ip": node_ip})
    yield from run_block(payload)


def _task_options(block: Block) -> dict[str, Any]:
    """No CPU or GPU reserved, pinned to the host's node, never retried on another node."""
    resources = dict(block.host.resources)
    if block.host.node_ip:
        resources[f"node:{block.host.node_ip}"] = 0.001
    return {"num_cpus": 0, "num_gpus": 0, "resources": resources, "max_retries": 0,
            "num_returns": "streaming", "runtime_env": {"env_vars": _TASK_ENV},
            "name": f"bakeoff-block-{block.host.name}"}


def _land_file(root: Path, rel: str, offset: int, data: bytes) -> None:
    """An arm file's new bytes, in the run directory (paths stay inside it)."""
    target = (root / rel).resolve()
    if not target.is_relative_to(root.resolve()) or not rel.startswith("arms/"):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("ab" if offset or target.suffix in APPENDED else "wb") as f:  # a resumed pass adds to its log
        f.write(data)
