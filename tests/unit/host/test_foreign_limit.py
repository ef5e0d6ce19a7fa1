"""The foreign-load flag is judged against the cores the engine and bakeoff leave free (issue 12 item 10):
a busy core next to an engine that uses 2 of 16 cores is not a disturbance; on a machine the engine fills,
a quarter of a core is."""

from __future__ import annotations

import pytest

from bakeoff.core.host import hostinfo
from bakeoff.core.host.hostinfo import FOREIGN_LOAD_FLOOR, CpuMeter


@pytest.mark.parametrize("cores, own, limit", [(16, 2.0, 3.5), (2, 2.0, FOREIGN_LOAD_FLOOR),
                                               (2, 1.0, FOREIGN_LOAD_FLOOR), (64, 8.0, 14.0),
                                               (16, 16.0, FOREIGN_LOAD_FLOOR)])
def test_the_limit_is_a_share_of_the_free_cores(monkeypatch: pytest.MonkeyPatch, cores: int, own: float,
                                                limit: float) -> None:
    monkeypatch.setattr(hostinfo, "usable_cores", lambda: cores)
    meter = CpuMeter(set())
    meter.own_cores = own
    assert meter.foreign_limit() == pytest.approx(limit)


def test_one_foreign_core_on_a_16_core_host_is_not_flagged_but_is_on_a_full_2_core_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from bakeoff.core.engine.client import StreamResult
    from bakeoff.core.measure import definitions as measure

    arm = SimpleNamespace(name="a", speculative=SimpleNamespace(enabled=False))
    adapter = SimpleNamespace(name="sim", capabilities=SimpleNamespace(token_counts=None))
    monkeypatch.setattr(measure, "account", lambda result, counts: measure.StreamAccount())
    stats = SimpleNamespace(flags=[], completion_tokens=None, decode_tps=None, prefill_tps=None, drafted=None,
                            cached_tokens=None)
    meter = CpuMeter(set())
    for cores, flagged in ((16, False), (2, True)):
        monkeypatch.setattr(hostinfo, "usable_cores", lambda cores=cores: cores)
        meter.own_cores = 2.0
        sample = measure.make_sample(arm, adapter, StreamResult(t_send_ns=0), stats, "r", "p", "greedy",  # type: ignore[arg-type]
                                     0, 0, 1.0, 0.0, meter.foreign_limit())
        assert any(f.startswith("foreign-load") for f in sample.flags) is flagged, cores
        assert sample.foreign_cpu_cores == 1.0
