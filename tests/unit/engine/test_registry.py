"""The registry: built-ins load through the entry-point group; broken or unknown engines say why."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from bakeoff.core.common.errors import EngineUnavailable, UnknownEngineError
from bakeoff.core.engine import registry
from bakeoff.core.engine.contract import EngineAdapter
from bakeoff.engines.llamacpp import LlamaCppAdapter

FAKE = {
    "llamacpp": EntryPoint("llamacpp", "bakeoff.engines.llamacpp:LlamaCppAdapter", registry.GROUP),
    "broken": EntryPoint("broken", "bakeoff_no_such_module:Adapter", registry.GROUP),
    "notadapter": EntryPoint("notadapter", "bakeoff.core.config.schema:Arm", registry.GROUP),
}


@pytest.fixture
def fake_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    # Unit tests must not depend on which plugins happen to be installed.
    monkeypatch.setattr(registry, "_entry_points", lambda: dict(FAKE))

    def load(name: str) -> type:
        return FAKE[name].load()  # type: ignore[no-any-return]

    monkeypatch.setattr(registry, "_load", lambda name: _checked(load, name))


def _checked(load: object, name: str) -> type:
    try:
        cls = load(name)  # type: ignore[operator]
    except ImportError as exc:
        raise EngineUnavailable(f"engine {name!r} failed to load: {type(exc).__name__}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, EngineAdapter)):
        raise EngineUnavailable(f"engine {name!r} entry point does not name an EngineAdapter subclass")
    return cls


def test_builtin_llamacpp_is_registered_through_the_entry_point_group() -> None:
    # The real installed metadata: built-ins register exactly like plugins.
    assert "llamacpp" in registry.engine_names()
    assert isinstance(registry.load_engine("llamacpp"), LlamaCppAdapter)


def test_unknown_engine_lists_available() -> None:
    with pytest.raises(UnknownEngineError, match=r"unknown engine 'nope'\. Available: .*llamacpp"):
        registry.load_engine("nope")


def test_broken_plugin_is_listed_unavailable_with_reason(fake_entry_points: None) -> None:
    infos = {i.name: i for i in registry.list_engines()}
    assert infos["llamacpp"].available
    assert not infos["broken"].available
    assert "ModuleNotFoundError" in (infos["broken"].error or "")
    assert "does not name an EngineAdapter" in (infos["notadapter"].error or "")


def test_real_stevedore_path_reports_import_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    # Through stevedore itself: a failing import reaches us via the load-failure callback.
    with pytest.raises(EngineUnavailable) as err:
        registry._load("bakeoff-test-no-such-engine")
    assert "unknown engine" in str(err.value) or "failed to load" in str(err.value)
