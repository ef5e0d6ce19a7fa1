"""An engine's own benchmark beside an arm's decode rate (llama.cpp: the same build's llama-bench).

Users quote ``llama-bench``; a bakeoff number is easier to trust when the same build's tool, run on the same GGUF
with the arm's settings, stands beside it. The reference is made after the run (the engines stopped, so nothing
else loads the machine), at the depth and length of the arm's plain answers: the median prompt tokens and the
longest answer. The server's *share* is bakeoff's median decode rate over the benchmark's tg rate — below 1 is
what the server's HTTP, sampling and scheduling cost over the bare decode loop.

Kept in ``references.json`` in the run directory (and in summary.json as ``references``), so ``bakeoff report``
shows it again without running anything.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from ..results.sample import Sample

__all__ = ["BenchReference", "REFERENCES_FILE", "bench_inputs", "read_references", "write_references"]

REFERENCES_FILE = "references.json"  # in the run directory, beside run.json


class BenchReference(BaseModel):
    """One arm's reference: the benchmark's decode rate at the arm's depth and length, and the server's share."""

    arm: str
    tool: str = Field("llama-bench", description="The engine's own benchmark that made it.")
    depth: int = Field(0, description="Prompt tokens the benchmark's tg test starts from (-d): the median of the "
                                      "arm's plain answers.")
    n_gen: int = Field(0, description="Tokens the tg test generates (-n): the arm's longest plain answer.")
    tg_tps: float | None = Field(None, description="The benchmark's mean decode rate, tok/s.")
    stddev_tps: float | None = Field(None, description="Its standard deviation over the tool's repetitions.")
    build_number: int | None = Field(None, description="The benchmark's build, as it reports it.")
    build_commit: str | None = Field(None, description="The benchmark's commit, as it reports it.")
    server_build_number: int | None = Field(None, description="The server's build (--version); a different build "
                                                              "is refused, never compared.")
    server_tps: float | None = Field(None, description="bakeoff's median decode rate of the arm, tok/s.")
    share: float | None = Field(None, description="server_tps / tg_tps.")
    argv: list[str] = Field(default_factory=list, description="The benchmark's command line.")
    llama_bench: str | None = Field(None, description="The benchmark binary.")
    foreign_cores: float | None = Field(None, description="Cores other processes used while the benchmark ran "
                                        "(None: not measurable here), as the foreign-load flag reads a sample.")
    foreign_limit: float | None = Field(None, description="The foreign-load limit at that time; above it the "
                                        "reference is marked disturbed.")
    error: str | None = Field(None, description="Why there is no reference (no tg_tps), or why it is refused.")
    line: str = Field("", description="The sentence the terminal prints.")


    @property
    def disturbed(self) -> bool:
        """The machine was busy while the benchmark ran: its figure is not a clean reference."""
        return self.foreign_cores is not None and self.foreign_limit is not None and \
            self.foreign_cores > self.foreign_limit


def bench_inputs(samples: Sequence[Sample], arm: str) -> tuple[int, int, list[float | None]]:
    """The depth, length and decode rates a reference is made for: an arm's valid plain answers (no structured
    output, no multi-turn), their median prompt tokens and longest completion (32 when none)."""
    plain = [s for s in samples if s.arm == arm and s.status == "ok" and s.structured is None and s.turn is None]
    depths = [s.prompt_tokens for s in plain if s.prompt_tokens]
    depth = int(statistics.median_low(depths)) if depths else 0
    n_gen = max((s.completion_tokens or 0 for s in plain), default=0) or 32
    return depth, n_gen, [s.decode_tps for s in plain]


def write_references(run_dir: Path, refs: dict[str, BenchReference]) -> Path:
    path = Path(run_dir) / REFERENCES_FILE
    path.write_text(json.dumps({k: v.model_dump(mode="json") for k, v in refs.items()}, indent=2) + "\n")
    return path


def read_references(run_dir: Path) -> dict[str, BenchReference]:
    """The run's references, {} when it has none (not asked for)."""
    path = Path(run_dir) / REFERENCES_FILE
    if not path.is_file():
        return {}
    return {k: BenchReference.model_validate(v) for k, v in json.loads(path.read_text()).items()}
