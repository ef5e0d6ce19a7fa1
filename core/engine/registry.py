"""The one place bakeoff talks to stevedore: engines come from the ``bakeoff.engines`` entry points.

Built-in engines register exactly like third-party plugins. Listing names reads entry-point metadata
only; loading imports the adapter module (which must import cheaply). A plugin that fails to import is
listed as unavailable with its reason; stevedore alone would skip it silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points

from stevedore import driver

from ..common.errors import EngineUnavailable, UnknownEngineError
from ..common.textfmt import did_you_mean
from .contract import EngineAdapter

__all__ = ["GROUP", "KNOWN_PLUGINS", "EngineInfo", "engine_names", "list_engines", "load_engine", "unknown_engine"]

GROUP = "bakeoff.engines"

# Engines that ship as separately installed plugins in this repository: an arm naming one that is not
# installed is told how to install it instead of "unknown engine".
KNOWN_PLUGINS = {
    "ikllama": "pip install ./plugins/bakeoff-ikllama",
    "sglang": "pip install ./plugins/bakeoff-sglang",
}


@dataclass
class EngineInfo:
    name: str
    target: str  # "module:attr" from the entry point
    distribution: str | None
    adapter: type[EngineAdapter] | None = None
    error: str | None = None  # why it could not be loaded

    @property
    def available(self) -> bool:
        return self.adapter is not None


def _entry_points() -> dict[str, object]:
    found: dict[str, object] = {}
    for ep in entry_points(group=GROUP):
        # Two distributions claiming one name would make the winner depend on install order.
        if ep.name in found and found[ep.name].value != ep.value:  # type: ignore[attr-defined]
            raise EngineUnavailable(f"engine name {ep.name!r} is registered twice: "
                                    f"{found[ep.name].value} and {ep.value}")  # type: ignore[attr-defined]
        found[ep.name] = ep
    return found


def engine_names() -> list[str]:
    """Registered engine names, without importing any adapter."""
    return sorted(_entry_points())


def _load(name: str) -> type[EngineAdapter]:
    failure: list[BaseException] = []

    def on_fail(_manager: object, _ep: object, exc: BaseException) -> None:
        failure.append(exc)

    try:
        mgr: driver.DriverManager[object] = driver.DriverManager(GROUP, name, invoke_on_load=False,
                                                                 on_load_failure_callback=on_fail)
    except Exception as exc:  # stevedore raises NoMatches/RuntimeError subclasses here
        if failure:
            raise EngineUnavailable(f"engine {name!r} failed to load: {type(failure[0]).__name__}: "
                                    f"{failure[0]}") from failure[0]
        raise unknown_engine(name) from exc
    adapter = mgr.driver
    if not (isinstance(adapter, type) and issubclass(adapter, EngineAdapter)):
        raise EngineUnavailable(f"engine {name!r} entry point does not name an EngineAdapter subclass")
    return adapter


def load_engine(name: str) -> EngineAdapter:
    """An instance of the adapter registered as ``name``.

    :raises UnknownEngineError: no such entry point (the message lists those available).
    :raises EngineUnavailable: the plugin is registered but failed to import.
    """
    if name not in _entry_points():
        raise unknown_engine(name)
    return _load(name)()


def unknown_engine(name: str) -> UnknownEngineError:
    """The error for an engine name no entry point registers: the plugin to install, or the closest name."""
    names = engine_names()
    if name in KNOWN_PLUGINS:
        return UnknownEngineError(f"engine {name!r} is a plugin that is not installed here: "
                                  f"`{KNOWN_PLUGINS[name]}` (from the bakeoff checkout) installs it")
    hint = did_you_mean(name, [*names, *KNOWN_PLUGINS]) or "."
    return UnknownEngineError(f"unknown engine {name!r}{hint} Available: {', '.join(names)}")


def list_engines() -> list[EngineInfo]:
    """Every registered engine with its adapter class, or the reason it is unavailable."""
    infos = []
    for name, ep in sorted(_entry_points().items()):
        dist = getattr(getattr(ep, "dist", None), "name", None)
        info = EngineInfo(name=name, target=ep.value, distribution=dist)  # type: ignore[attr-defined]
        try:
            info.adapter = _load(name)
        except EngineUnavailable as exc:
            info.error = str(exc)
        infos.append(info)
    return infos
