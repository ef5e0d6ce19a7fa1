"""Whole-file checks known on paper, before anything runs: the live box's guard rails and a phase run's shape.

Field-level rules live on the models (core/config/schema.py); these need the whole file at once.
"""

from __future__ import annotations

from ..common.errors import ConfigError
from .live import Phases
from .schema import BakeoffFile

__all__ = ["check_live_config", "check_phases_config", "stops_live"]

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def stops_live(config: BakeoffFile) -> bool:
    """The live service is stopped when the run launches an engine (it needs the box); attached-only runs
    (a phase run against the live server) leave it up."""
    if config.live is None:
        return False
    arms = config.arms
    if config.phases is not None:
        arms = [a for a in arms if a.name == (config.phases.server or config.arms[0].name)]
    return any(not a.attached for a in arms)


def check_live_config(config: BakeoffFile) -> None:
    """Guard rails known before anything runs.

    :raises ConfigError: a launched arm would bind outside loopback or on the live port, or an arm
        attaches to the live service that the run stops.
    """
    live = config.live
    if live is None:
        return
    stops = stops_live(config)
    for arm in config.arms:
        if arm.attached:
            assert arm.url is not None
            if stops and arm.url.rstrip("/").startswith(live.base_url):
                raise ConfigError(f"arm {arm.name!r}: url {arm.url} is the live service, which this run stops; "
                                  "attach only in a phase run (phases:) where nothing is launched")
            continue
        if arm.settings.host not in _LOOPBACK:
            raise ConfigError(f"arm {arm.name!r}: settings.host {arm.settings.host!r}: with live: every arm runs on "
                              "a private loopback port (127.0.0.1)")
        if live.port is not None and arm.settings.port == live.port:
            raise ConfigError(f"arm {arm.name!r}: settings.port {live.port} is the live service's port; "
                              "leave it unset (a free loopback port is picked)")


def check_phases_config(config: BakeoffFile) -> None:
    """:raises ConfigError: a phase run needs exactly one server arm and plain requests."""
    phases: Phases | None = config.phases
    if phases is None:
        return
    names = [a.name for a in config.arms]
    if phases.server is not None and phases.server not in names:
        raise ConfigError(f"phases.server {phases.server!r} is not an arm name")
    if len(names) > 1:
        raise ConfigError(f"phases: a phase run measures one server (phases.server), but the file has {len(names)} "
                          "arms; keep only the server's arm")
    w = config.workload
    if w.depths or w.concurrency or w.passes > 1:
        raise ConfigError("phases: workload.depths, workload.concurrency and workload.passes do not apply to a phase "
                          "run (each phase sends prompts x modes until duration_s ends)")
