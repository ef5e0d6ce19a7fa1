"""The options only ExLlama (TabbyAPI) has (``arms[i].options``), in a module of their own: the adapter and the
installer both read them, and neither imports the other for them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ExllamaOptions", "DOCKER_IMAGE"]

DOCKER_IMAGE = "ghcr.io/theroyallab/tabbyapi:latest"


class ExllamaOptions(BaseModel):
    """Options only TabbyAPI/ExLlamaV3 has (``arms[i].options``)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["exllama"] = "exllama"
    tabby_dir: str | None = Field(None, description="TabbyAPI checkout holding main.py (native launch); "
                                                    "default $BAKEOFF_TABBY_DIR.")
    python: str | None = Field(None, description="Interpreter with torch, exllamav3 and TabbyAPI's requirements; "
                                                 "default $BAKEOFF_TABBY_PYTHON, then bakeoff's own.")
    docker_image: str = Field(DOCKER_IMAGE, description="Image for launch: docker.")
    cache_size: int | None = Field(None, ge=256, description="KV cache tokens (multiple of 256); default "
                                                             "ctx × parallel, rounded up to 256.")
    chunk_size: int | None = Field(None, ge=256, description="Prompt-processing chunk size (model.chunk_size).")
    draft_cache_mode: str | None = Field(None, description="Draft cache: FP16, Q8/Q6/Q4 or 'k,v' bits such as '8,8'.")
    dynamic_draft: bool | None = Field(None, description="draft_model.dynamic_draft (ExLlamaV3 adapts the draft "
                                                         "length); off unless set.")
    tensor_parallel_backend: Literal["native", "nccl"] | None = Field(None,
                                                                      description="model.tensor_parallel_backend.")
    autosplit_reserve: list[float] | None = Field(None, description="MB kept free per GPU by the autosplit loader.")
    loop_detect_window: int | None = Field(None, ge=0, description="Per-request loop detection window; bakeoff "
                                                                   "sends 0 (off) for fixed-length workloads.")
    config: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Extra config.yml keys by section "
                                              "(merged last, recorded in the run directory's config.yml).")
