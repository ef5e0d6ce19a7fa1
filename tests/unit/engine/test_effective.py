"""core/engine/effective.py: the one place that compares what an arm asks with what the engine says it runs."""

from __future__ import annotations

from typing import Any

from bakeoff.core.config.schema import Arm
from bakeoff.core.engine.effective import Effective, compare_effective

SOURCES = {"context_tokens": ("/props", "n_ctx"), "slots": ("/props", "total_slots"),
           "speculative": ("/slots", "speculative"), "spec_method": ("/slots", "speculative.types"),
           "n_max": ("/server_info", "speculative_num_steps"), "kv_type": ("/v1/model", "cache_mode")}


def arm(**fields: Any) -> Arm:
    return Arm(name="a", engine="x", model="m", **fields)


def attached(**fields: Any) -> Arm:
    return Arm(name="a", engine="x", url="http://127.0.0.1:9/v1", **fields)


def eff(**fields: Any) -> Effective:
    return Effective(sources=SOURCES, **fields)


def test_nothing_reported_nothing_compared() -> None:
    assert compare_effective(arm(settings={"ctx": 4096, "parallel": 2}, speculative={"method": "mtp"}),
                             Effective()) == []


def test_each_common_field_against_the_arm() -> None:
    asked = arm(settings={"ctx": 4096, "parallel": 2, "kv_type": "q8_0"}, speculative={"method": "mtp", "n_max": 3})
    running = eff(context_tokens=2048, slots=4, speculative=True, spec_method="none,draft-simple", n_max=2,
                  kv_type="FP16", notes={"context_tokens": "--fit or slots"})
    out = compare_effective(asked, running, "llama-server", {"spec_method": "draft-mtp", "kv_type": "Q8"})
    assert out == [
        "asked ctx 4096 per slot, /props says n_ctx 2048 (--fit or slots)",
        "asked 2 slot(s), /props says total_slots 4",
        "asked draft-mtp, /slots says speculative.types none,draft-simple",
        "asked speculative.n_max 3, /server_info says speculative_num_steps 2",
        "asked settings.kv_type 'q8_0' (cache_mode Q8), /v1/model says cache_mode FP16",
    ]
    same = eff(context_tokens=4096, slots=2, speculative=True, spec_method="none,DRAFT-MTP", n_max=3, kv_type="Q8")
    assert compare_effective(asked, same, "llama-server", {"spec_method": "draft-mtp", "kv_type": "Q8"}) == []


def test_slots_default_to_one() -> None:
    assert compare_effective(arm(), eff(slots=1)) == []
    assert compare_effective(arm(), eff(slots=4)) == ["asked 1 slot(s), /props says total_slots 4"]


def test_speculation_asked_but_off_and_off_but_on() -> None:
    off = compare_effective(arm(speculative={"method": "ngram"}), eff(speculative=False), "vLLM")
    assert off == ["speculative.method 'ngram' asked, but /slots says speculative: false — vLLM runs WITHOUT "
                   "speculation"]
    on = compare_effective(arm(), eff(speculative=True, spec_method="EAGLE3"))
    assert on == ["speculation is off in the arm but /slots says speculative: true (EAGLE3)"]
    # off: the method is not compared as well (one fact, one line)
    assert len(compare_effective(arm(speculative={"method": "mtp"}), eff(speculative=False, spec_method="none"),
                                 terms={"spec_method": "draft-mtp"})) == 1


def test_attached_servers_run_what_they_run() -> None:
    """Settings and speculation someone else turned on are theirs; speculation asked but off is still wrong."""
    running = eff(context_tokens=2048, slots=4, speculative=True, n_max=9, kv_type="FP16")
    assert compare_effective(attached(settings={"ctx": 4096}), running) == []
    off = compare_effective(attached(speculative={"method": "ngram"}), eff(speculative=False))
    assert len(off) == 1 and "WITHOUT speculation" in off[0]


def test_unnamed_sources_still_say_what_differs() -> None:
    out = compare_effective(arm(settings={"ctx": 512}), Effective(context_tokens=256))
    assert out == ["asked ctx 512 per slot, the engine says context_tokens 256"]


def test_record_keeps_raw_and_adds_reported_common_fields() -> None:
    e = Effective(raw={"n_ctx_per_slot": 2048, "binary": {"path": "/x"}}, context_tokens=2048, speculative=False)
    assert e.record() == {"n_ctx_per_slot": 2048, "binary": {"path": "/x"}, "context_tokens": 2048,
                          "speculative": False}
