"""The typed, versioned content of ``run.json``: what was run, on what, and how each arm start went.

``RunRecord`` is the only shape run.json is written in and read through (core/results/store.py). Its
``schema_version`` is its own (not the Sample schema's): it changes when a field changes meaning, and a
bakeoff refuses a run.json newer than it knows, with a message that says so.

Old run directories still read: every field has a default, run.json files written before this model
(``schema_version`` 1, or none) are upgraded by :func:`upgrade_legacy`, and keys this bakeoff does not model
(a feature's own bookkeeping, or a newer minor addition) are kept as they are and written back unchanged.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..common.errors import NewerRunRecordError, RunRecordError
from ..config.fingerprint import ArmFingerprint
from ..config.schema import BakeoffFile

__all__ = [
    "RUN_SCHEMA_VERSION",
    "ArmAttempt",
    "EngineRecord",
    "GateAnswer",
    "ExtraLaunches",
    "HostRecord",
    "LiveRecord",
    "PhaseRecord",
    "PlacementRecord",
    "RunRecord",
    "StopRecord",
    "ToolInfo",
    "WarmupRecord",
    "failed_arms",
    "parse_run_record",
]

# 1: the untyped dict of bakeoff 0.1 (schema_version copied from the Sample schema, or absent).
# 2: written through RunRecord; same keys, arm records under ``arm_records`` with ``pass``.
RUN_SCHEMA_VERSION = 2


class _Open(BaseModel):
    """A recorded section: the fields bakeoff reads are typed; other keys are kept and written back."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class ToolInfo(_Open):
    name: str = "bakeoff"
    version: str | None = None


class EngineRecord(_Open):
    """The engine an arm ran on and the capabilities its adapter declared (as recorded, by name)."""

    engine: str | None = None
    capabilities: dict[str, Any] = Field(default_factory=dict)

    @property
    def stateful_speculators(self) -> list[str]:
        return [str(x) for x in self.capabilities.get("stateful_speculators") or []]


class GateAnswer(_Open):
    """One quality probe's raw answer on an arm's first start (core/measure/gates.py); scored when summarized."""

    passed: bool | None = Field(None, description="None: the probe could not be asked (skipped).")
    detail: str = ""
    answer: str | None = Field(None, description="The raw answer (first 500 characters).")


class WarmupRecord(_Open):
    """The untimed requests of one engine start, and whether the decode rate settled before the timed ones."""

    requests: int = 0
    decode_tps: list[float | None] = Field(default_factory=list, description="Each warm-up request's decode rate.")
    settled: bool | None = Field(None, description="Two consecutive rates within the workload's warmup_settle "
                                                   "(None: not asked, or no rate to judge).")


class ArmAttempt(_Open):
    """One start of one arm in one pass: how it went, what the engine said it runs with.

    Built by the arm session (core/run/arm.py) as the arm goes and appended to arm_records.jsonl when the
    attempt ends. Keys of older or newer bakeoffs are kept as extra fields when read, never written by this one.
    """

    status: str = Field("ok", description="ok, failed, or skipped (already complete).")
    pass_index: int = Field(0, alias="pass")
    boot_s: float | None = None
    effective: dict[str, Any] = Field(default_factory=dict)
    mismatches: list[str] = Field(default_factory=list)
    version: str | None = None
    model_id: str | None = None
    refused: dict[str, Any] | None = None
    shared_engine: bool | None = None
    error: str | None = None
    reason: str | None = None
    log_tail: str | None = None
    gpu_state: dict[str, Any] | None = None
    gpu_idle_power_w: float | None = Field(None, description="Board power before this arm's engine loaded (W).")
    gpu_engine_mib: float | None = Field(None, description="GPU memory the engine's processes hold (NVML, MiB).")
    gpu_vram_peak_mib: float | None = Field(None, description="Highest GPU memory in use during a request (MiB).")
    gates: dict[str, GateAnswer] | None = Field(None, description="Quality probes' raw answers, first start only.")
    host: str | None = Field(None, description="Ray: the host whose block ran this attempt.")
    warmup: WarmupRecord | None = Field(None, description="Warm-up on a fresh engine start.")
    prefix_cache: dict[str, Any] | None = Field(None, description="Sessions workload: the engine-only request "
                                                "fields that turned the prefix cache on ({}: the server's default).")

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    def to_json(self) -> dict[str, Any]:
        """The JSON object arm_records.jsonl holds: ``pass`` by its alias, fields never set left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def failed_arms(records: dict[str, list[ArmAttempt]]) -> list[str]:
    """Arms whose latest attempt at some pass failed (a resumed pass that succeeded clears it)."""
    out = []
    for arm, attempts in records.items():
        latest = {a.pass_index: a.status for a in attempts}
        if any(status == "failed" for status in latest.values()):
            out.append(arm)
    return out


class PhaseRecord(_Open):
    """One timed phase of a phase run (core/run/phases.py): its knob, its clock, its probes and GPU readings."""

    phase: str
    setting: str
    started_at: float | None = None
    ended_at: float | None = None
    requests: int = 0
    probes: int = 0
    unhealthy_probes: int = 0
    gpu: dict[str, Any] | None = Field(None, description="Mean power, clocks, temperature (NVML) over the phase.")
    applied: dict[str, Any] | None = Field(None, description="The knob's apply command: argv, exit code, time.")
    reverted: dict[str, Any] | None = Field(None, description="The knob's revert, as the run's guard performed it.")
    problem: str | None = Field(None, description="The probe failure that ended the phase run.")


class LiveRecord(_Open):
    """The live service a run stopped and restored (core/run/live.py): when, by whom, and its health."""

    name: str | None = None
    kind: str | None = None
    health: str | None = None
    model: str | None = None
    healthy_before: bool | None = None
    stopped_at: float | None = None
    restored_at: float | None = None
    restored_by: str | None = Field(None, description="bakeoff, or the watchdog when bakeoff could not.")
    healthy_after: bool | None = None
    log_dir: str | None = None


class HostRecord(_Open):
    """One host of a run on Ray (``--executor ray``): the machine, its GPUs and driver, the engine builds its
    arms ran, and why its block stopped short, if it did."""

    host: dict[str, Any] = Field(default_factory=dict, description="CPU, memory, GPUs (name, driver) as "
                                                                   "core/host/hostinfo.py reads them on that node.")
    gpus: list[dict[str, Any]] = Field(default_factory=list)
    bandwidth: dict[str, Any] = Field(default_factory=dict)
    node: dict[str, Any] = Field(default_factory=dict, description="The hosts: entry the block ran for.")
    node_ip: str | None = None
    ray_node_id: str | None = None
    engines: dict[str, str] = Field(default_factory=dict, description="Stored arm name -> engine build.")
    lost: str | None = Field(None, description="Why the block stopped before its end (a lost node).")


class PlacementRecord(_Open):
    """Which host ran which arms, under which stored names (core/config/placement.py)."""

    blocks: dict[str, list[str]] = Field(default_factory=dict)
    baselines: dict[str, str | None] = Field(default_factory=dict)
    arm_order: list[str] = Field(default_factory=list)
    copies: dict[str, dict[str, str]] = Field(default_factory=dict, description="Arm -> host -> stored name, "
                                                                                "for arms run on several hosts.")


class ExtraLaunches(_Open):
    """Launches drawn because an arm came up in two speed states (core/analysis/launches.py, issue 33 item 2)."""

    bound: int = Field(0, description="workload.extra_launches: the most extra passes the run may draw.")
    passes: list[int] = Field(default_factory=list, description="Indices in ``orders`` of the extra passes.")
    drawn: dict[str, int] = Field(default_factory=dict, description="Per arm: extra engine starts drawn.")
    why: list[str] = Field(default_factory=list, description="Per extra pass: the arms that asked for it, and why.")
    stopped: str | None = Field(None, description="Why no more were drawn (settled, or the bound reached).")


class StopRecord(_Open):
    """Why a run ended before the end of its plan, written where it stopped (core/run/bakeoff.py); --resume
    clears it. Absent on a run that was killed outright (SIGKILL, power loss): nothing could write it."""

    at: float | None = None
    why: str = Field("error", description="signal (Ctrl-C, SIGTERM, SIGHUP) or error.")
    detail: str = Field("", description="The signal's name, or the error's one line.")


class RunRecord(_Open):
    """run.json. ``config`` is the resolved bakeoff file with secrets masked (core/common/redact.py)."""

    schema_version: int = RUN_SCHEMA_VERSION
    run_id: str | None = None
    tool: ToolInfo = Field(default_factory=ToolInfo)
    config: BakeoffFile | None = None
    baseline: str | None = None
    orders: list[list[str]] = Field(default_factory=list)
    seed: int | None = None
    prompts: list[dict[str, Any]] = Field(default_factory=list)
    engines: dict[str, EngineRecord] = Field(default_factory=dict)
    host: dict[str, Any] = Field(default_factory=dict)
    gpus: list[dict[str, Any]] = Field(default_factory=list)
    bandwidth: dict[str, Any] = Field(default_factory=dict)
    roofline_models: dict[str, dict[str, Any]] = Field(default_factory=dict)
    started_at: float | None = None
    finished_at: float | None = None
    resumed_at: list[float] = Field(default_factory=list)
    stopped: StopRecord | None = Field(None, description="Why the run stopped short of its plan (None: it did "
                                       "not, or nothing could say why).")
    arm_records: dict[str, list[ArmAttempt]] = Field(
        default_factory=dict, description="A copy of arm_records.jsonl, written when a run ends (older runs kept "
                                          "them only here).")
    phases: list[PhaseRecord] = Field(default_factory=list, description="Live-knob phase records.")
    live: LiveRecord | None = None
    watchdog: list[dict[str, Any]] = Field(default_factory=list)
    executor: str | None = Field(None, description="ray for a run on a Ray cluster; absent for a local run.")
    placement: PlacementRecord | None = None
    hosts: dict[str, HostRecord] = Field(default_factory=dict, description="Ray: every host that ran a block.")
    extra_launches: ExtraLaunches | None = Field(None, description="Passes drawn for arms bimodal across "
                                                 "launches (absent: none were considered).")
    fingerprints: dict[str, ArmFingerprint] = Field(default_factory=dict, description="Per arm: its configuration "
                                                   "fingerprint and canonical form (core/config/fingerprint.py).")

    # -- what readers ask ----------------------------------------------------------------------
    @property
    def arm_names(self) -> list[str]:
        return [a.name for a in self.config.arms] if self.config else []

    @property
    def name(self) -> str | None:
        return self.config.name if self.config else None

    def failed_arms(self) -> list[str]:
        return failed_arms(self.arm_records)

    def to_json(self) -> dict[str, Any]:
        """The JSON document run.json holds: fields as given (set ones only), arm records with ``pass``."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


def upgrade_legacy(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 run.json as a version-2 document (the keys are the same; only the version changes)."""
    return {**data, "schema_version": RUN_SCHEMA_VERSION}


def _drop_unknown_config_keys(config: dict[str, Any], exc: ValidationError) -> tuple[dict[str, Any], list[str]]:
    """The recorded config without keys this bakeoff's BakeoffFile does not know (written by an older one)."""
    dropped = []
    for err in exc.errors():
        if err["type"] != "extra_forbidden":
            continue
        *path, last = err["loc"]
        node: Any = config
        for part in path:
            node = node[part]
        if isinstance(node, dict) and last in node:
            del node[last]
            dropped.append(".".join(str(p) for p in err["loc"]))
    return config, dropped


def _validated_config(raw: Any, source: str, warnings: list[str]) -> BakeoffFile | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise RunRecordError(f"{source}: config is {type(raw).__name__}, not a bakeoff file")
    import copy

    config = copy.deepcopy(raw)
    for _ in range(3):  # unknown keys can hide others below them: drop, then validate again
        try:
            return BakeoffFile.model_validate(config)
        except ValidationError as exc:
            config, dropped = _drop_unknown_config_keys(config, exc)
            if not dropped:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise RunRecordError(f"{source}: config.{where}: {first['msg']}") from None
            warnings.append(f"{source}: recorded config keys this bakeoff does not know were ignored: "
                            f"{', '.join(dropped)}")
    raise RunRecordError(f"{source}: the recorded config does not validate")


def parse_run_record(data: Any, source: str = "run.json", warnings: list[str] | None = None) -> RunRecord:
    """Read a run.json document of any version this bakeoff knows.

    :param warnings: receives what reading tolerated (e.g. config keys of an older bakeoff, ignored).
    :raises NewerRunRecordError: written by a newer bakeoff (its schema_version is higher than known).
    :raises RunRecordError: not a run record; the message names the field.
    """
    if not isinstance(data, dict):
        raise RunRecordError(f"{source}: not a JSON object")
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise RunRecordError(f"{source}: schema_version {version!r} is not a whole number")
    if version > RUN_SCHEMA_VERSION:
        raise NewerRunRecordError(f"{source}: schema_version {version}, this bakeoff reads run records up to "
                                  f"{RUN_SCHEMA_VERSION}; upgrade bakeoff to read this run")
    if version < RUN_SCHEMA_VERSION:
        data = upgrade_legacy(data)
    sink = warnings if warnings is not None else []
    config = _validated_config(data.get("config"), source, sink)
    try:
        record = RunRecord.model_validate({k: v for k, v in data.items() if k != "config"})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RunRecordError(f"{source}: {where}: {first['msg']}") from None
    if config is not None:
        record.config = config  # keep it marked as set, so it is written back
    return record
