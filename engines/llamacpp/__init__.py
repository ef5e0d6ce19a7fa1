"""llama.cpp's llama-server: the adapter (adapter.py), its source build (build.py), GGUF facts read before
launch (gguf_meta.py), the tiny-model synthesizer (synth.py) and the speculative self-test (selftest.py)."""

from __future__ import annotations

from .adapter import SPEC_TYPES, LlamaCppAdapter, LlamaCppOptions, parse_acceptance_lines, split_modes_of

__all__ = ["LlamaCppAdapter", "LlamaCppOptions", "SPEC_TYPES", "parse_acceptance_lines", "split_modes_of"]
