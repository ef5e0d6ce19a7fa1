"""Bundles (core/results/bundle.py, `bakeoff bundle` / `bakeoff verify`): one file holding the run, a manifest
of SHA-256 hashes, fingerprints, engine builds and the rig report; tampering fails verification; secrets stay
out."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest
from sharing_runs import CPU_RIG, shared_run
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.common.errors import BundleError
from bakeoff.core.results.bundle import bundle_run, verify_bundle
from bakeoff.core.results.store import RunDir


def _members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def _rewrite(bundle: Path, members: dict[str, bytes]) -> None:
    with gzip.open(bundle, "wb") as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def run(tmp_path: Path) -> Path:
    path: Path = shared_run(tmp_path / "run", {"base": 100.0, "ngram": 120.0}, passes=2, reps=2)
    (path / "arms" / "base").mkdir(parents=True)
    (path / "arms" / "base" / "engine-pass0.log").write_text("main: server is listening on http://127.0.0.1:8080\n")
    (path / "report").mkdir()  # a plot as matplotlib writes it: namespace URLs ending in '#' are no secret
    (path / "report" / "plot.svg").write_text('<rdf:RDF xmlns:cc="http://creativecommons.org/ns#"/>\n')
    return path


def test_bundle_holds_the_run_manifest_fingerprints_builds_and_rig(run: Path, tmp_path: Path) -> None:
    path, sha, manifest = bundle_run(run, tmp_path / "out.tar.gz")
    members = _members(path)
    assert set(members) == {"manifest.json"} | {f"run/{rel}" for rel in manifest.files}
    assert {"run.json", "samples.jsonl", "arms/base/engine-pass0.log"} <= set(manifest.files)
    assert not [rel for rel in manifest.files if "sqlite" in rel]  # the index is left out, and said so
    assert any("SQLite index" in why for why in manifest.left_out)
    assert manifest.samples == 2 * 2 * 2 * 2 and manifest.run_id == RunDir.open(run).run_id
    assert set(manifest.fingerprints) == {"base", "ngram"}
    assert manifest.engines["base"] == {"engine": "fake", "versions": ["b1"],
                                        "binary": {"path": "/cache/llama-server", "backend": "cpu"}}
    assert manifest.rig == CPU_RIG and "run.json" in manifest.rig_source
    check = verify_bundle(path)
    assert check.ok, check.problems
    assert check.sha256 == sha


def test_a_changed_sample_fails_verification(run: Path, tmp_path: Path) -> None:
    path, _, _ = bundle_run(run, tmp_path / "b.tar.gz")
    members = _members(path)
    lines = members["run/samples.jsonl"].decode().splitlines()
    first = json.loads(lines[0])
    first["decode_tps"] *= 2  # a flattering edit
    members["run/samples.jsonl"] = ("\n".join([json.dumps(first), *lines[1:]]) + "\n").encode()
    _rewrite(path, members)
    problems = verify_bundle(path).problems
    assert any(p.startswith("run/samples.jsonl: changed since the bundle was made") for p in problems), problems


def test_added_missing_and_relabelled_files_fail(run: Path, tmp_path: Path) -> None:
    path, _, _ = bundle_run(run, tmp_path / "c.tar.gz")
    members = _members(path)
    members["run/extra.txt"] = b"added later"
    del members["run/arms/base/engine-pass0.log"]
    manifest = json.loads(members["manifest.json"])
    manifest["fingerprints"]["ngram"]["id"] = "0" * 16  # claims another configuration
    members["manifest.json"] = json.dumps(manifest).encode()
    _rewrite(path, members)
    problems = verify_bundle(path).problems
    assert "run/extra.txt: in the bundle but not in the manifest" in problems
    assert "run/arms/base/engine-pass0.log: listed in the manifest, missing from the bundle" in problems
    assert "the manifest's fingerprints are not those of run/run.json" in problems


def test_not_a_bundle_and_paths_outside(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tar")
    assert verify_bundle(junk).problems[0].startswith("not a readable bundle")
    evil = tmp_path / "evil.tar.gz"
    _rewrite(evil, {"../escape.txt": b"x", "manifest.json": b"{}"})
    problems = verify_bundle(evil).problems
    assert "../escape.txt: a path outside the bundle" in problems
    with pytest.raises(BundleError, match="not a bakeoff run directory"):
        bundle_run(tmp_path, tmp_path / "x.tar.gz")


def test_secrets_stay_out(run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = RunDir.open(run).read_record()
    assert record.config is not None
    record.config.arms[0].api_key_env = "TEST_ENGINE_KEY"
    RunDir(run).write_record(record)
    monkeypatch.setenv("TEST_ENGINE_KEY", "sk-live-0123456789")
    log = run / "arms" / "base" / "engine-pass0.log"
    log.write_text("args: --api-key sk-live-0123456789\nAuthorization: Bearer abcdef0123456789\n")
    path, _, manifest = bundle_run(run, tmp_path / "s.tar.gz")
    text = _members(path)["run/arms/base/engine-pass0.log"].decode()
    assert "sk-live-0123456789" not in text and "abcdef0123456789" not in text
    assert manifest.masked == ["arms/base/engine-pass0.log"]  # not the plot
    assert verify_bundle(path).ok
    # a bundle made by something that did not mask is caught
    members = _members(path)
    members["run/arms/base/engine-pass0.log"] = b"Authorization: Bearer abcdef0123456789\n"
    entry = json.loads(members["manifest.json"])
    import hashlib
    data = members["run/arms/base/engine-pass0.log"]
    entry["files"]["arms/base/engine-pass0.log"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    members["manifest.json"] = json.dumps(entry).encode()
    _rewrite(path, members)
    assert any("shaped like a credential" in p for p in verify_bundle(path).problems)


PROVIDER_SECRETS = {"ghp_": b"token ghp_PROBEabcdefghijklmnopqrstuvwxyz0123\n",
                    "hf_": b"HF_TOKEN=hf_PROBEabcdefghijklmnopqrstuvwxyz\n",
                    "aws": b"aws_secret_access_key = PROBEwJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY\n"}


def test_provider_tokens_in_a_run_file_are_masked_on_packing_and_verify_refuses_a_bundle_holding_one(
        run: Path, tmp_path: Path) -> None:
    notes = run / "arms" / "base" / "notes.log"
    notes.write_bytes(b"".join(PROVIDER_SECRETS.values()))
    path, _, manifest = bundle_run(run, tmp_path / "p.tar.gz")
    packed = _members(path)["run/arms/base/notes.log"]
    assert b"PROBE" not in packed and packed.startswith(b"token ghp_***\nHF_TOKEN=***\n")
    assert "arms/base/notes.log" in manifest.masked and verify_bundle(path).ok
    # one packed by something that did not mask, its manifest rewritten to match: verify names what it holds
    members = _members(path)
    members["run/arms/base/notes.log"] = data = b"".join(PROVIDER_SECRETS.values())
    entry = json.loads(members["manifest.json"])
    import hashlib
    entry["files"]["arms/base/notes.log"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    members["manifest.json"] = json.dumps(entry).encode()
    _rewrite(path, members)
    [problem] = verify_bundle(path).problems
    assert problem.startswith("run/arms/base/notes.log: holds text shaped like a credential (a GitHub token; "
                              "a Hugging Face token; a URL password or query, a bearer token, or a key=value pair")


def _with_member(bundle: Path, target: Path, name: str, size: int) -> Path:
    """``bundle`` with one more member of ``size`` zero bytes, streamed (never held whole)."""
    with tarfile.open(bundle, "r:gz") as src, tarfile.open(target, "w:gz", compresslevel=1) as dst:
        for m in src:
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
        info = tarfile.TarInfo(name)
        info.size = size
        dst.addfile(info, io.BufferedReader(io.BytesIO(bytes(size))))
    return target


def test_a_member_past_the_size_bound_is_refused_by_its_header_unread(run: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.core.results import bundle as bundle_module

    path = bundle_run(run, tmp_path / "b.tar.gz")[0]
    monkeypatch.setattr(bundle_module, "MAX_MEMBER_BYTES", 1 << 16)
    bomb = _with_member(path, tmp_path / "bomb.tar.gz", "run/zeros.bin", (1 << 16) + 1)
    verified = verify_bundle(bomb)
    assert verified.problems == ["run/zeros.bin: 65537 bytes, more than verify reads for one file (65536 bytes)"]
    assert "zeros.bin" not in verified.files  # nothing of it held
    assert verify_bundle(path).ok  # the bound leaves a real bundle alone


def test_a_bundle_that_unpacks_past_the_bound_is_refused_without_unpacking_it_all(
        run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.core.results import bundle as bundle_module

    path = bundle_run(run, tmp_path / "b.tar.gz")[0]
    bomb = _with_member(path, tmp_path / "bomb.tar.gz", "run/zeros.bin", 4 << 20)
    monkeypatch.setattr(bundle_module, "MAX_ARCHIVE_BYTES", 2 << 20)
    [problem] = verify_bundle(bomb).problems
    assert problem.startswith("unpacks to more than 2 MiB, more than verify reads")
    res = CliRunner().invoke(app, ["verify", str(bomb)])
    assert res.exit_code == 2 and "unpacks to more than 2 MiB" in res.output, res.output


def test_bundle_and_verify_commands(run: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    target = tmp_path / "cli.tar.gz"
    res = runner.invoke(app, ["bundle", str(run), "--out", str(target)])
    assert res.exit_code == 0, res.output
    assert "sha256:" in res.output and "base: fingerprint" in res.output
    assert "gpus (nvidia-ml-py is not installed (pip install 'bakeoff[gpu]'))" in res.output  # not read as markup
    res = runner.invoke(app, ["verify", str(target)])
    assert res.exit_code == 0 and "verified" in res.output, res.output
    members = _members(target)
    members["run/run.json"] = members["run/run.json"].replace(b'"b1"', b'"b2"')
    _rewrite(target, members)
    res = runner.invoke(app, ["verify", str(target)])
    assert res.exit_code == 2 and "run/run.json: changed since the bundle was made" in res.output, res.output
