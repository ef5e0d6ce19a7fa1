"""Executors: what runs a planned bakeoff. ``local`` runs every arm on this machine (the protocol's own loop);
``ray`` runs each host's paired block on a Ray cluster (core/run/ray_executor.py, imported only when asked for, so
a local run never imports Ray).

An executor takes the plan, the run directory and what is already stored, and lands every sample through
the run directory's single write path (``RunDir.append``), wherever it was measured.
"""

from __future__ import annotations

import importlib.util
from typing import Protocol

from ..common.errors import ConfigError
from ..config.schema import BakeoffFile
from ..measure.points import DoneKeys
from ..results.store import RunDir
from .events import RunEvents
from .plan import Plan
from .protocol import run_plan

__all__ = ["Executor", "LocalExecutor", "RAY_INSTALL_HINT", "executor_for"]

RAY_INSTALL_HINT = "pip install -e '.[ray]' in the bakeoff checkout"  # not 'bakeoff[ray]': no index has bakeoff


class Executor(Protocol):
    name: str

    def run(self, plan: Plan, run: RunDir, events: RunEvents, done: DoneKeys) -> None:
        """Run every arm of ``plan`` not in ``done`` into ``run``."""


class LocalExecutor:
    """Every arm on this machine, interleaved pass by pass (today's behaviour)."""

    name = "local"

    def run(self, plan: Plan, run: RunDir, events: RunEvents, done: DoneKeys) -> None:
        run_plan(plan, run, events, done)


def executor_for(config: BakeoffFile, kind: str | None = None, address: str | None = None) -> Executor:
    """The executor ``--executor`` (else the file's ``executor:``, else local) names.

    :raises ConfigError: an unknown kind, Ray not installed, or ``hosts:`` without Ray.
    """
    spec = config.executor
    kind = kind or (spec.kind if spec else "local")
    address = address or (spec.address if spec else None)
    if kind == "local":
        if config.hosts:
            raise ConfigError("hosts: places blocks of arms on Ray nodes; run with --executor ray "
                              "(or executor: ray in the file)")
        if address:
            raise ConfigError("--address is the Ray cluster's address; it needs --executor ray")
        return LocalExecutor()
    if kind != "ray":
        raise ConfigError(f"--executor {kind!r}: use local or ray")
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(f"--executor ray needs Ray, which is not installed: {RAY_INSTALL_HINT}")
    if config.phases is not None or config.live is not None:
        raise ConfigError("--executor ray: live: and phases: run against one service on this machine; "
                          "run them with the local executor")
    from .ray_executor import RayExecutor

    return RayExecutor(address)
