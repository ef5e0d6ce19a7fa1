"""bakeoff's GGUF header reader against the ``gguf`` package's reader, on the real SmolLM2 file and on every kind
of synthesized model: the same values and tensor table, without decoding the vocabulary (the package's reader
spends 2-6 s on SmolLM2's 49k strings, once per file a run reads)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFReader, GGUFValueType

from bakeoff.core import read_gguf_header
from bakeoff.core.engine.models import smollm2_gguf
from bakeoff.engines.llamacpp.synth import SynthSpec, synth_pair, synthesize, toy_tokenizer


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root, tok = tmp_path_factory.mktemp("gguf"), toy_tokenizer(300)
    out = [smollm2_gguf(), synthesize(SynthSpec("mtp", agree=True, acceptance=0.5), tok, root)]
    for kind in ("dflash2", "dspark", "eagle3"):
        out += synth_pair(kind, agree=False, tokenizer=tok, root=root)
    return out


def test_values_and_tensors_are_the_gguf_packages(models: list[Path]) -> None:
    for path in models:
        reader, header = GGUFReader(path), read_gguf_header(path)
        assert set(header.values) == set(reader.fields) - {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}
        for key, field in reader.fields.items():
            if key.startswith("GGUF."):
                continue
            string_array = field.types[0] == GGUFValueType.ARRAY and field.types[-1] == GGUFValueType.STRING
            if string_array or len(field.data) > 4096:  # stepped over, never decoded
                assert header.get(key) is None, (path.name, key)
            else:
                assert header.get(key) == field.contents(), (path.name, key)
        assert [(t.name, t.shape, t.ggml_type, t.n_bytes) for t in header.tensors] == [
            (t.name, tuple(int(n) for n in t.shape), int(t.tensor_type), int(t.n_bytes)) for t in reader.tensors]


@pytest.mark.parametrize("cut", [0, 3, 30, 200])
def test_a_truncated_file_is_an_unreadable_gguf_that_names_itself(models: list[Path], tmp_path: Path,
                                                                  cut: int) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(models[1].read_bytes()[:cut])
    with pytest.raises(ValueError, match=r"cut\.gguf is not a readable GGUF file"):
        read_gguf_header(path)


def test_a_missing_file_names_itself(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"absent\.gguf is not a readable GGUF file"):
        read_gguf_header(tmp_path / "absent.gguf")
