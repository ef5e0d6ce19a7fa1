"""The options only ik_llama.cpp has (``arms[i].options``), in a module of their own: the adapter and the
installer both read them, and neither imports the other for them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["IkLlamaOptions"]


class IkLlamaOptions(BaseModel):
    """Options only ik_llama.cpp has (``arms[i].options``); each changes the command line when set."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["ikllama"] = "ikllama"
    binary: str | None = Field(None, description="Path of ik_llama.cpp's llama-server; default: "
                                                 "$BAKEOFF_IK_LLAMA_SERVER, then bakeoff's cached build.")
    build_version: str | None = Field(None, description="ik-llama-cpp-python version of the cached build to use.")
    split_mode: Literal["none", "layer", "attn", "graph"] | None = Field(
        None, description="-sm, with the fork's own modes ('graph' splits each layer's graph across GPUs).")
    max_gpu: int | None = Field(None, ge=1, description="--max-gpu: most GPUs used at a time (split_mode 'graph').")
    graph_scheduling: bool = Field(False, description="-smgs: force split-mode-graph scheduling (split_mode 'graph').")
    threads_batch: int | None = Field(None, ge=1, description="-tb: threads for prompt processing.")
    run_time_repack: bool = Field(False, description="-rtr: repack weights for the CPU's fastest kernels at load.")
    mla: int | None = Field(None, ge=0, le=3, description="-mla: MLA attention mode for DeepSeek-style models.")
    attention_max_batch: int | None = Field(None, ge=1, description="-amb: most attention batch (MiB) without FA.")
    no_fused_moe: bool = Field(False, description="-no-fmoe: switch off the fused MoE up/gate kernel (on by default).")
    grouped_expert_routing: bool = Field(False, description="-ger: grouped expert routing.")
    merge_qkv: bool = Field(False, description="-mqkv: merge Q, K, V into one tensor.")
    k_cache_hadamard: bool = Field(False, description="-khad: Hadamard transform of the K cache.")
    smart_expert_reduction: str | None = Field(None, pattern=r"^\d+,[\d.]+$",
                                               description="-ser 'K,t': use fewer experts when their weights allow.")
    ngram_size_m: int | None = Field(None, ge=1, le=1024, description="--spec-ngram-size-m: n-gram proposal length "
                                                                      "(ngram simple/map-k/map-k4v).")
    ngram_min_hits: int | None = Field(None, ge=1, description="--spec-ngram-min-hits (ngram map-k/map-k4v).")
    draft_gpu_layers: int | None = Field(None, ge=0, description="-ngld: draft-model layers on the GPU.")
    verbosity: int | None = Field(None, ge=0, description="--verbosity.")
