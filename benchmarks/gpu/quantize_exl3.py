"""Quantize a model directory to EXL3 with exllamav3's own converter (its convert.py, as a function).

The calibration set is cut down (rows/columns) because the model is a random-weight stand-in whose
quality nobody measures; the quantized tensors, kernels and file layout are the real EXL3 ones.

    python benchmarks/gpu/quantize_exl3.py IN_DIR OUT_DIR WORK_DIR BITS
"""

from __future__ import annotations

import sys


def main(in_dir: str, out_dir: str, work_dir: str, bits: str) -> int:
    from exllamav3.conversion.convert_model import main as convert
    from exllamav3.conversion.convert_model import parser, prepare

    args = parser.parse_args(["-i", in_dir, "-o", out_dir, "-w", work_dir, "-b", bits, "-hb", "6",
                              "-cr", "16", "-cc", "512"])
    in_args, job_state, ok, err = prepare(args)
    if not ok:
        print(f"quantize: {err}")
        return 1
    convert(in_args, job_state)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
