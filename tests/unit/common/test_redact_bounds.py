"""Issue 33: secret masking is linear in the text, and a masked output line stays JSON."""

from __future__ import annotations

import json
import threading

import pytest

from bakeoff.core.common.redact import Redactor, redact_text


@pytest.mark.parametrize("text", ["A" * 300_000, "a-" * 150_000, "x_" * 150_000, "ab:/" * 75_000, "ghp_" * 75_000,
                                  "AKIA" * 75_000], ids=["letters", "a-a-", "x_x_", "scheme-like", "ghp_", "AKIA"])
def test_long_space_free_text_is_masked_in_linear_time(text: str) -> None:
    """Quadratic patterns took 7.5 s for 16 KB of ``a-a-``: 300 KB would take over half an hour. Linear
    masking does it in well under a second; the 120 s bound only keeps a regression from hanging the suite."""
    done: list[str] = []
    thread = threading.Thread(target=lambda: done.append(redact_text(text)), daemon=True)
    thread.start()
    thread.join(120)
    assert done == [text], "masking a long space-free text did not finish: a pattern backtracks quadratically"


def test_shapes_still_masked_after_the_linear_rewrite() -> None:
    out = redact_text('my_api_key=abcdef x HF-SECRET: qwerty12 password="hunter22" http://u:pw12@h/p?key=zz')
    assert out == 'my_api_key=*** x HF-SECRET: *** password="***" http://u:***@h/p?key=***'


def test_masked_output_line_stays_json(tmp_path: object) -> None:
    """An env value that is also a number in the output line (max_tokens 2048) must not break the JSON."""
    from bakeoff.core.results.sample import Sample
    from bakeoff.core.results.store import RunDir
    from bakeoff.core.run.arm import _keep_output

    run = RunDir(tmp_path / "run", redactor=Redactor(["2048"]))  # type: ignore[operator]
    sample = Sample.model_construct(arm="a", engine="sim", prompt="p", mode="greedy", rep=0, pass_index=0, depth=None,
                                    max_tokens=2048, output_sha256="x")
    _keep_output(run, sample, "2048 tokens", 10.0)
    line = (run.arm_dir("a") / "outputs.jsonl").read_text()
    assert json.loads(line)["max_tokens"] == 2048 and json.loads(line)["text"] == "*** tokens"


KEY = "sk-PROBE-CUTCUTCUT-abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.mark.parametrize("echo, fragment", [
    ("-" * 280 + "invalid api key " + KEY[:20], "sk-PROBE-CUTCUT"),  # cut by the 300-character error text
    (json.dumps(json.dumps({"key": 'sk-PROBE"QUOTE\\SLASH-7777'})), "SLASH-7777"),  # JSON-escaped twice
    ("denied for key=sk-PROBE%2FURL%2BENC%3D8888&retry=0", "URL%2BENC"),  # URL-encoded
], ids=["cut", "json-escaped", "url-encoded"])
def test_a_key_echoed_in_another_spelling_is_masked(echo: str, fragment: str) -> None:
    redactor = Redactor([KEY, 'sk-PROBE"QUOTE\\SLASH-7777', "sk-PROBE/URL+ENC=8888"])
    assert fragment not in redactor.text(echo)


def test_the_decoded_url_password_is_a_secret() -> None:
    from bakeoff.core.common.redact import config_secrets

    secrets = config_secrets({"arms": [{"name": "a", "url": "http://admin:p%40ss-SECRET-99@127.0.0.1:1/m"}]}, {})
    assert "ss-SECRET-99" not in Redactor(secrets).text("HTTP 401: user admin password p@ss-SECRET-99 rejected")


def test_a_key_in_finish_reason_is_not_stored(tmp_path: object) -> None:
    from bakeoff.core.results.sample import Sample
    from bakeoff.core.results.store import RunDir

    run = RunDir(tmp_path / "run", redactor=Redactor(["sk-PROBE-FINISH-1212"]))  # type: ignore[operator]
    sample = Sample(arm="a", engine="sim", prompt="p", mode="greedy", rep=0, pass_index=0, max_tokens=16,
                    finish_reason="length sk-PROBE-FINISH-1212")
    run.append(sample)
    holding = [f.name for f in run.path.rglob("*") if f.is_file() and b"sk-PROBE-FINISH-1212" in f.read_bytes()]
    assert holding == []


def test_masking_an_output_stops_at_its_budget_and_says_what_it_left_out() -> None:
    redactor = Redactor(["sk-PROBE-BUDGET-4242"])
    text = ("line sk-PROBE-BUDGET-4242 " + "x" * 60 + "\n") * 40_000  # 3.5 MB: more than one slice
    kept = redactor.text_within(text, 0.0)  # no time at all: the first slice only
    assert "sk-PROBE-BUDGET" not in kept and "more characters not kept" in kept and len(kept) < len(text)
    whole = redactor.text_within(text, 600.0)
    assert whole == redactor.text(text) and "not kept" not in whole


def test_an_engine_log_is_masked_while_the_engine_writes_it(tmp_path: object) -> None:
    """Item 7: a bakeoff killed mid-arm left the whole log unmasked; now each scan masks what was written."""
    import os
    import time
    from pathlib import Path

    from bakeoff.core.common.redact import LiveLogMasker

    log = Path(str(tmp_path)) / "engine.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # as the engine holds it
    try:
        with LiveLogMasker(Redactor(["hf_SECRET_TOKEN_77"]), log, interval_s=0.05):
            os.write(fd, b"argv: --hf-token hf_SECRET_TOKEN_77\nloading model\n")
            deadline = time.monotonic() + 30
            while b"hf_SECRET" in log.read_bytes() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert b"hf_SECRET" not in log.read_bytes(), "the log was not masked while it was written"
            os.write(fd, b"echo hf_SECRET_")  # a secret cut across two writes
            os.write(fd, b"TOKEN_77 served\n")
            while b"hf_SECRET" in log.read_bytes() and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        os.close(fd)
    assert log.read_bytes() == (b"argv: --hf-token ******************\nloading model\n"
                                b"echo ****************** served\n")  # every line kept, every byte in place
