"""Where a bakeoff runs: the executor (``local`` or ``ray``) and, on Ray, which host runs which paired block.

A *block* is the set of arms one host runs, interleaved pass by pass exactly as a local run does, with the
client beside the engine. Arms compared with each other must share a host: a block holding any arm other
than the baseline holds the baseline too, so every ratio in the report is measured on one machine. A block
may repeat on several hosts; an arm that runs on more than one host is stored as ``arm@host`` (its samples,
arm directory and records), so each host's copy keeps its own measurement points and the report compares
the copies as hardware, never as an arm effect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["ExecutorSpec", "Host", "Block", "blocks_of", "check_placement", "placement_record"]

_HOST_NAME = re.compile(r"^[A-Za-z0-9._+-]+$")


class ExecutorSpec(BaseModel):
    """``executor:`` in a bakeoff file: ``local`` (default) or ``ray`` with an optional cluster address."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["local", "ray"] = Field("local", description="local: this machine; ray: the blocks of "
                                                               "hosts: on a Ray cluster (pip install -e '.[ray]').")
    address: str | None = Field(None, description="Ray cluster address (e.g. ray://head:10001 or 10.0.0.1:6379); "
                                                  "default: $RAY_ADDRESS, else a Ray instance on this machine.")

    @model_validator(mode="before")
    @classmethod
    def _plain_name(cls, data: Any) -> Any:
        return {"kind": data} if isinstance(data, str) else data


class Host(BaseModel):
    """One entry of ``hosts:``: a Ray node (picked by custom resources or its IP) and the block it runs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Host name in the report (letters, digits, '.', '_', '+', '-').")
    resources: dict[str, float] = Field(default_factory=dict, description=(
        "Ray custom resources the node offers (`ray start --resources '{\"box-a\": 1}'`): the block runs on "
        "a node that has them. The task itself reserves no CPU and no GPU."))
    node_ip: str | None = Field(None, description="Pin the block to the Ray node with this IP address.")
    arms: list[str] | None = Field(None, description="The block: arms this host runs (default: every arm).")

    @field_validator("name")
    @classmethod
    def _name_is_filename_safe(cls, v: str) -> str:
        if not _HOST_NAME.match(v) or len(v) > 40:
            raise ValueError("use at most 40 letters, digits, '.', '_', '+' or '-' (it becomes part of file names)")
        return v

    @model_validator(mode="after")
    def _pinned(self) -> Host:
        if not self.resources and not self.node_ip:
            raise ValueError(f"host {self.name!r}: give resources: or node_ip: so its block runs on that node")
        return self


@dataclass(frozen=True)
class Block:
    """One host's paired block: ``stored`` maps each arm of the block to the name its samples carry."""

    host: Host
    stored: dict[str, str]
    baseline: str | None  # the stored name of the baseline on this host (None: the block lacks it)


def blocks_of(hosts: list[Host], arm_names: list[str], baseline: str) -> list[Block]:
    """Each host's block, with ``arm@host`` for arms that run on several hosts."""
    per_host = {h.name: [a for a in arm_names if h.arms is None or a in h.arms] for h in hosts}
    runs_on = {a: sum(a in arms for arms in per_host.values()) for a in arm_names}
    blocks = []
    for host in hosts:
        stored = {a: f"{a}@{host.name}" if runs_on[a] > 1 else a for a in per_host[host.name]}
        blocks.append(Block(host, stored, stored.get(baseline)))
    return blocks


def check_placement(hosts: list[Host], arm_names: list[str], baseline: str) -> None:
    """Refuse a placement that would compare arms across machines or leave an arm unmeasured.

    :raises ValueError: with a one-line reason naming the host or arm.
    """
    seen: set[str] = set()
    for host in hosts:
        if host.name in seen:
            raise ValueError(f"hosts: two hosts are named {host.name!r}")
        seen.add(host.name)
        unknown = [a for a in host.arms or [] if a not in arm_names]
        if unknown:
            raise ValueError(f"hosts: host {host.name!r} names {unknown[0]!r}, which is not an arm")
        block = host.arms if host.arms is not None else arm_names
        if not block:
            raise ValueError(f"hosts: host {host.name!r} runs no arm")
        if baseline not in block:
            raise ValueError(f"hosts: host {host.name!r} runs {block[0]!r} without the baseline {baseline!r}; arms "
                             f"compared with each other must run on the same host, so add {baseline!r} to its arms")
    placed = {a for h in hosts for a in (h.arms if h.arms is not None else arm_names)}
    missing = [a for a in arm_names if a not in placed]
    if missing:
        raise ValueError(f"hosts: arm {missing[0]!r} runs on no host; add it to a host's arms")


def placement_record(blocks: list[Block], arm_names: list[str]) -> dict[str, Any]:
    """What run.json records of the placement (the report reads it to compare within each host)."""
    order = [b.stored[a] for a in arm_names for b in blocks if a in b.stored]
    return {"blocks": {b.host.name: list(b.stored.values()) for b in blocks},
            "baselines": {b.host.name: b.baseline for b in blocks},
            "arm_order": list(dict.fromkeys(order)),
            "copies": {a: {b.host.name: b.stored[a] for b in blocks if a in b.stored}
                       for a in arm_names if sum(a in b.stored for b in blocks) > 1}}
