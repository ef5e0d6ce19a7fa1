"""The options only SGLang has (``arms[i].options``), in a module of their own: the adapter and the
installer both read them, and neither imports the other for them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SglangOptions", "IMAGE"]

IMAGE = "lmsysorg/sglang:v0.5.23-cu129-amd64"


class SglangOptions(BaseModel):
    """Options only SGLang has (``arms[i].options``)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["sglang"] = "sglang"
    python: str | None = Field(None, description="Interpreter that has sglang installed; default "
                                                 "$BAKEOFF_SGLANG_PYTHON, then the one running bakeoff.")
    eagle_topk: int | None = Field(None, ge=1, description="--speculative-eagle-topk; above 1 drafts a tree and "
                                                           "then needs num_draft_tokens.")
    num_draft_tokens: int | None = Field(None, ge=2, description="--speculative-num-draft-tokens, the verified "
                                                                 "root included; default speculative.n_max + 1.")
    radix_cache: bool = Field(False, description="Keep SGLang's prefix cache on (repeated prompts then skip "
                                                 "prefill, which flatters TTFT).")
    decode_log_interval: int = Field(10, ge=1, description="--decode-log-interval: decode steps between the log "
                                                           "lines per-request acceptance is read from.")
    image: str = Field(IMAGE, description="launch: compose — the SGLang image (keep it pinned).")
    hf_cache: str | None = Field(None, description="launch: compose — Hugging Face cache mounted read-only for a "
                                                   "hub model id (default $HF_HOME, then ~/.cache/huggingface).")
