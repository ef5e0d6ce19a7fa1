"""vLLM: the adapter (adapter.py) and the CPU venv and model conversion it runs from (install.py)."""

from __future__ import annotations

from .adapter import VLLM_METHODS, VllmAdapter, VllmOptions, acceptance_from_metrics, speculative_config

__all__ = ["VllmAdapter", "VllmOptions", "VLLM_METHODS", "speculative_config", "acceptance_from_metrics"]
