"""Matrix sweeps: expansion into named arms, errors that name the sweep key, shared engines, the n-max table."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from bakeoff.core import LaunchInputs
from bakeoff.core.common.errors import CapabilityNotSupported, ConfigError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.config.schema import Arm, RequestOverrides, Workload
from bakeoff.core.config.sweep import arm_name_for, expand_sweeps
from bakeoff.core.engine.contract import Capabilities, EngineAdapter, LaunchSpec, MethodKnobs
from bakeoff.core.engine.launcher import SharedEngine
from bakeoff.core.results.record import ArmAttempt
from bakeoff.core.run import plan as plan_module
from bakeoff.core.run import protocol
from bakeoff.core.run.plan import effective_workload, order_for_sharing, server_key

ARM_SWEEP = """\
name: s
baseline: spec
arms:
  - name: plain
    engine: llamacpp
    model: smollm2
  - name: spec
    engine: llamacpp
    model: smollm2
    speculative: {method: draft, draft_model: smollm2}
    sweep:
      speculative.n_max: [1, 2, 3]
      settings.split: [layer, tensor]
"""


def test_arm_sweep_expands_to_every_combination_with_names_and_points() -> None:
    cfg = parse_bakeoff(ARM_SWEEP)
    names = [a.name for a in cfg.arms]
    assert names == ["plain", "spec-n_max1-split-layer", "spec-n_max1-split-tensor", "spec-n_max2-split-layer",
                     "spec-n_max2-split-tensor", "spec-n_max3-split-layer", "spec-n_max3-split-tensor"]
    arm = cfg.arms[4]
    assert arm.speculative.n_max == 2 and arm.settings.split == "tensor"
    assert arm.speculative.method == "draft" and arm.speculative.draft_model == "smollm2"
    assert arm.swept == {"speculative.n_max": 2, "settings.split": "tensor"}
    assert not arm.sweep and cfg.arms[0].swept == {}
    # the baseline named the swept arm: it moves to the first arm it expanded into
    assert cfg.baseline == "spec-n_max1-split-layer"
    # only keys the user set (or the sweep set) count as set: capability checks see the same arm
    assert arm.speculative.set_fields() == {"draft_model", "n_max"}


def test_top_level_sweep_applies_to_every_arm_and_expansion_is_idempotent() -> None:
    cfg = parse_bakeoff("""\
arms:
  - {name: a, engine: llamacpp, model: smollm2}
  - {name: b, engine: llamacpp, model: smollm2, sweep: {settings.threads: [1, 2]}}
sweep: {workload.max_tokens: [32, 64]}
""")
    assert [a.name for a in cfg.arms] == ["a-max_tokens32", "a-max_tokens64", "b-threads1-max_tokens32",
                                          "b-threads1-max_tokens64", "b-threads2-max_tokens32",
                                          "b-threads2-max_tokens64"]
    assert cfg.arms[1].workload.max_tokens == 64 and cfg.arms[2].settings.threads == 1
    assert expand_sweeps(cfg) is cfg


def test_unknown_sweep_key_names_the_key_and_its_line() -> None:
    with pytest.raises(ConfigError) as err:
        parse_bakeoff(ARM_SWEEP.replace("speculative.n_max:", "speculative.n_maxx:"), "f.yaml")
    assert "f.yaml:12: arms[1].sweep.speculative.n_maxx" in str(err.value)
    assert "n_max" in str(err.value)  # lists the keys that exist
    with pytest.raises(ConfigError, match=r"sweep.workload.reps: .*max_tokens"):
        parse_bakeoff("arms: [{name: a, engine: x, model: m}]\nsweep: {workload.reps: [1, 2]}\n")
    with pytest.raises(ConfigError, match=r"sweep.name: unknown key"):
        parse_bakeoff("arms: [{name: a, engine: x, model: m}]\nsweep: {name: [b, c]}\n")


def test_empty_values_and_invalid_values_are_refused_naming_the_point() -> None:
    with pytest.raises(ConfigError, match=r"give at least one value"):
        parse_bakeoff("arms: [{name: a, engine: x, model: m, sweep: {speculative.n_max: []}}]\n")
    with pytest.raises(ConfigError) as err:
        parse_bakeoff("arms: [{name: a, engine: x, model: m, sweep: {speculative.n_max: [2, 0]}}]\n", "f.yaml")
    assert '"speculative.n_max": 0' in str(err.value) and "greater than or equal to 1" in str(err.value)


def test_colliding_names_after_expansion_are_an_error() -> None:
    with pytest.raises(ConfigError, match="two arms are named 'a-n_max2'"):
        parse_bakeoff("arms:\n  - {name: a, engine: x, model: m, sweep: {speculative.n_max: [2]}}\n"
                      "  - {name: a-n_max2, engine: x, model: m}\n")


def test_names_are_file_safe() -> None:
    assert arm_name_for("m", {"model": "/models/Qwen 3/q.gguf"}) == "m-model-q"
    assert arm_name_for("x", {"settings.enforce_eager": True, "speculative.p_min": 0.5}) == \
        "x-enforce_eager-on-p_min0.5"


def test_request_level_arms_share_a_server_and_launch_level_arms_do_not() -> None:
    cfg = parse_bakeoff("""\
arms: [{name: d, engine: llamacpp, model: smollm2, speculative: {method: draft, draft_model: smollm2}}]
sweep: {speculative.n_max: [2, 4], workload.max_tokens: [32, 64]}
""")
    keys = {a.name: server_key(a) for a in cfg.arms}
    assert keys["d-n_max2-max_tokens32"] == keys["d-n_max2-max_tokens64"]
    assert keys["d-n_max2-max_tokens32"] != keys["d-n_max4-max_tokens32"]
    shuffled = [["d-n_max2-max_tokens32", "d-n_max4-max_tokens64", "d-n_max2-max_tokens64", "d-n_max4-max_tokens32"]]
    assert order_for_sharing(shuffled, cfg.arms) == [["d-n_max2-max_tokens32", "d-n_max2-max_tokens64",
                                                      "d-n_max4-max_tokens64", "d-n_max4-max_tokens32"]]


def test_effective_workload_applies_only_the_arms_overrides() -> None:
    w = Workload(max_tokens=512, reps=3)
    arm = Arm(name="a", engine="x", model="m", workload=RequestOverrides(max_tokens=64))
    got = effective_workload(w, arm)
    assert (got.max_tokens, got.reps, got.fixed_length) == (64, 3, True)
    assert effective_workload(w, Arm(name="b", engine="x", model="m")) is w


class FakeEngine:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name, self.alive = log, name, True


def test_shared_engine_reuses_one_start_per_key_and_always_stops() -> None:
    log: list[str] = []

    def opener(name: str):  # type: ignore[no-untyped-def]
        @contextmanager
        def start() -> Iterator[tuple[str, FakeEngine]]:
            log.append(f"start {name}")
            try:
                yield f"http://{name}", FakeEngine(log, name)
            finally:
                log.append(f"stop {name}")
        return start

    shared = SharedEngine()
    with shared.use("k1", opener("one")) as ((base, _), fresh):
        assert (base, fresh) == ("http://one", True)
    with shared.use("k1", opener("unused")) as ((base, engine), fresh):
        assert (base, fresh) == ("http://one", False)
        engine.alive = False  # died: the next arm gets a fresh start even with the same key
    with shared.use("k1", opener("two")) as (_, fresh):
        assert fresh
    with shared.use("k2", opener("three")):
        pass
    with pytest.raises(RuntimeError), shared.use("k2", opener("unused")):
        raise RuntimeError("arm failed")
    assert log == ["start one", "stop one", "start two", "stop two", "start three", "stop three"]
    shared.close()  # nothing held: a no-op
    assert log[-1] == "stop three"


# -- arms that would launch the same thing ------------------------------------------------------
class _IgnoresNMin(EngineAdapter):
    """Declares n_min for ngram-simple but forgets to map it: the mistake the launch comparison catches."""

    name: ClassVar[str] = "forgetful"
    capabilities: ClassVar[Capabilities] = Capabilities(
        speculative={"none": MethodKnobs(), "ngram/simple": MethodKnobs(knobs=("n_max", "n_min"))},
        default_variants={"ngram": "simple"})

    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        n_max = arm.speculative.n_max
        return LaunchSpec(argv=["engine", "-m", str(arm.model), "--port", str(launch.port), "--spec",
                                arm.speculative.method, *(["--n-max", str(n_max)] if n_max else [])])

    def model_ref(self, model: str) -> str:
        return model  # a fake engine loads no file


def _forgetful_plan(monkeypatch: pytest.MonkeyPatch, sweep: str, twins: bool = False) -> Any:
    monkeypatch.setattr(plan_module, "load_engine", lambda name: _IgnoresNMin())
    twin = "  - {name: twin, engine: forgetful, model: m.gguf}\n" if twins else ""
    text = (f"name: s\narms:\n  - {{name: plain, engine: forgetful, model: m.gguf}}\n{twin}"
            f"  - name: ng\n    engine: forgetful\n    model: m.gguf\n    speculative: {{method: ngram}}\n"
            f"    sweep: {{{sweep}}}\nworkload: {{prompts: [prose]}}\n")
    return plan_module.plan_run(parse_bakeoff(text))


def test_a_sweep_whose_arms_launch_the_same_command_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"^speculative.n_min has no effect on forgetful ngram-simple: arms "
                                          r"'ng-n_min1' and 'ng-n_min2' differ in speculative.n_min \(1 vs 2\) but "
                                          r"would launch the same command and send the same requests"):
        _forgetful_plan(monkeypatch, "speculative.n_min: [1, 2]")


def test_a_sweep_that_changes_the_launch_and_identical_twins_are_planned(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _forgetful_plan(monkeypatch, "speculative.n_max: [1, 2]", twins=True)  # twins measure noise on purpose
    assert [a.arm.name for a in plan.arms] == ["plain", "twin", "ng-n_max1", "ng-n_max2"]


def test_a_launch_error_is_raised_at_plan_time_before_any_arm_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken(_IgnoresNMin):
        def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
            if arm.model == "bad.gguf":
                raise ConfigError("cannot build this launch")
            return super().launch_spec(arm, launch)

    monkeypatch.setattr(plan_module, "load_engine", lambda name: Broken())
    text = ("name: s\narms:\n  - {name: good, engine: forgetful, model: m.gguf}\n"
            "  - {name: bad, engine: forgetful, model: bad.gguf}\nworkload: {prompts: [prose]}\n")
    started: list[str] = []
    def run_arm(*args: object, **kwargs: object) -> ArmAttempt:
        started.append("arm")
        return ArmAttempt()

    monkeypatch.setattr(protocol, "_run_arm", run_arm)
    with pytest.raises(ConfigError, match="cannot build this launch"):
        protocol.run_plan(plan_module.plan_run(parse_bakeoff(text)), None)  # type: ignore[arg-type]
    assert started == []


def test_llamacpp_bad_knob_arm_beside_a_good_arm_is_refused_at_plan_time(tmp_path: Path) -> None:
    """AUDIT H1: ngram-cache with n_max ended the run at launch with a ConfigError; ngram-simple dropped n_min."""
    import numpy as np
    from gguf import GGUFWriter

    model = tmp_path / "m.gguf"
    w = GGUFWriter(str(model), "llama")
    w.add_tensor("token_embd.weight", np.zeros((2, 2), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for bad, message in (("{method: ngram, variant: cache, n_max: 4}", "speculative.n_max has no effect on llamacpp "
                                                                       "ngram-cache"),
                         ("{method: ngram, variant: simple, n_min: 2}", "speculative.n_min has no effect on llamacpp "
                                                                        "ngram-simple"),
                         ("{method: draft, draft_model: " + str(model) + ", lookup_min: 2}",
                          "speculative.lookup_min has no effect on llamacpp method 'draft'")):
        text = (f"name: s\narms:\n  - {{name: good, engine: llamacpp, model: {model}, "
                f"options: {{binary: /bin/true}}}}\n"
                f"  - {{name: bad, engine: llamacpp, model: {model}, options: {{binary: /bin/true}}, "
                f"speculative: {bad}}}\nworkload: {{prompts: [prose]}}\n")
        with pytest.raises(CapabilityNotSupported, match=message):
            plan_module.plan_run(parse_bakeoff(text))
