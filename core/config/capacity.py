"""The ``capacity:`` section: find each arm's highest load at which the chosen SLOs still hold.

``bakeoff capacity FILE`` (core/cli/capacity.py) reads it; ``bakeoff run`` ignores it. The load is either a number
of simultaneous streams (closed loop: one batch of N requests per probe) or an arrival rate (open loop:
``workload.arrival``'s requests at that rate per probe). The search (core/run/capacity.py) brackets the boundary
by multiplying the load by ``growth`` from ``start`` until an SLO fails, then narrows it by bisection (or a secant
step on the SLO margins) until the bracket is within ``resolution``; docs/capacity.md says what each field costs.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["CapacitySection", "Constraint", "GoodputConstraint", "CAPACITY_METRICS"]

CAPACITY_METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class Constraint(_Strict):
    """One latency limit at a percentile over a probe's requests (a failed request counts as too slow)."""

    metric: Literal["ttft_s", "tpot_s", "itl_s", "e2e_s"] = Field(
        description="ttft_s (from the scheduled time under open loop), tpot_s ((e2e - TTFT) / (N - 1)), itl_s "
                    "(1 / decode tok/s) or e2e_s.")
    percentile: float = Field(90, gt=0, le=100, description="Percentile of the probe's requests (90: p90).")
    max_s: float = Field(gt=0, description="The most seconds the percentile may reach.")

    @property
    def label(self) -> str:
        name = {"ttft_s": "TTFT", "tpot_s": "TPOT", "itl_s": "ITL", "e2e_s": "e2e"}[self.metric]
        return f"{name} p{self.percentile:g} ≤ {_seconds(self.max_s)}"


class GoodputConstraint(_Strict):
    """A share of the probe's requests that must meet every limit of a ``workload.slo`` tier."""

    slo: str = Field(description="A tier named in workload.slo.")
    min_share: float = Field(0.9, description="Least share of requests meeting the tier ('90%' or 0.9).")

    @field_validator("min_share", mode="before")
    @classmethod
    def _share(cls, v: Any) -> float:
        text = str(v).strip()
        try:
            share = float(text.rstrip("%").strip()) / (100 if text.endswith("%") else 1)
        except ValueError:
            raise ValueError(f"min_share {v!r}: give a percentage such as 90% (or a share such as 0.9)") from None
        if not 0 < share <= 1:
            raise ValueError(f"min_share {v!r}: a share above 0 and at most 100%")
        return share

    @property
    def label(self) -> str:
        return f"goodput {self.slo} ≥ {self.min_share:.0%}"


def _seconds(s: float) -> str:
    return f"{s * 1000:g} ms" if s < 1 else f"{s:g} s"


class CapacitySection(_Strict):
    """Where the capacity search looks and what it calls holding."""

    load: Literal["streams", "rate"] = Field("streams", description="streams: closed loop, N requests at once per "
                                             "probe; rate: open loop, workload.arrival's requests at a rate (req/s).")
    constraints: list[Constraint] = Field(default_factory=list, description="Latency limits; all must hold.")
    goodput: GoodputConstraint | None = Field(None, description="Also require this share of requests to meet a "
                                              "workload.slo tier.")
    start: float = Field(1, gt=0, description="First load probed (streams or req/s).")
    max: float = Field(256, gt=0, description="Highest load probed; an arm holding there is reported as ≥ max.")
    growth: float = Field(2.0, gt=1, le=16, description="Bracketing: each next load is this times the last.")
    resolution: float = Field(0.05, gt=0, lt=1, description="Stop narrowing when the bracket's upper end is "
                              "within this share of its lower end (streams: also when they are 1 apart).")
    replicates: int = Field(2, ge=1, le=20, description="Probes per arm and load, interleaved across arms; the "
                            "boundary's interval resamples them.")
    strategy: Literal["bisect", "secant"] = Field("bisect", description="How the bracket is narrowed: bisect "
                                                  "(geometric midpoint) or secant (where the SLO margins, "
                                                  "interpolated in log load, cross zero).")
    max_levels: int = Field(16, ge=2, le=64, description="Most loads probed per arm.")
    hopeless: float = Field(3.0, gt=1, description="Over-saturation stop: a probe whose worst constraint is this "
                            "many times its limit (or, open loop, whose requests in flight pass backlog × slots) "
                            "ends its load at once, recorded failing, with no further replicates.")
    backlog: float = Field(3.0, gt=1, description="Open loop: requests in flight, in multiples of the engine's "
                           "slots, at which a load's backlog counts as growing without bound (the rest of its "
                           "schedule is not sent).")

    @model_validator(mode="after")
    def _limits(self) -> CapacitySection:
        if not self.constraints and self.goodput is None:
            raise ValueError("capacity: give at least one constraint (e.g. {metric: ttft_s, percentile: 90, "
                             "max_s: 2}) or a goodput requirement")
        if self.max < self.start:
            raise ValueError(f"capacity.max {self.max:g} is below capacity.start {self.start:g}")
        if self.load == "streams" and (self.start != int(self.start) or self.max != int(self.max)):
            raise ValueError("capacity: streams are whole numbers; give start and max as integers")
        return self

    @property
    def labels(self) -> list[str]:
        out = [c.label for c in self.constraints]
        return out + ([self.goodput.label] if self.goodput else [])
