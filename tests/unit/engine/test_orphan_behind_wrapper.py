"""Issue 33: an engine behind a wrapper that does not ``exec`` is stopped by the next bakeoff,
although the wrapper (the recorded group leader) is gone."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from bakeoff.core.engine.launcher import _group_members, _start_ticks, running_dir, stop_leftover_engines


def test_the_engine_a_dead_wrapper_left_in_its_group_is_stopped(tmp_path: Path) -> None:
    # the wrapper starts the "engine" without exec, then dies (as a SIGKILLed bakeoff's PDEATHSIG kills it)
    wrapper = subprocess.Popen(["sh", "-c", "sleep 600 & echo $!; exit 0"], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    assert wrapper.stdout is not None
    engine = int(wrapper.stdout.readline())
    wrapper.wait(timeout=10)
    try:
        assert _start_ticks(engine) is not None and _group_members(wrapper.pid) == [engine]
        running_dir().mkdir(parents=True, exist_ok=True)
        record = running_dir() / f"{wrapper.pid}.json"
        record.write_text(json.dumps({"pid": wrapper.pid, "start": 1, "pgid": wrapper.pid, "argv0": "fakellama.sh",
                                      "bakeoff_pid": 1, "bakeoff_start": None, "arm_dir": str(tmp_path)}))
        lines = stop_leftover_engines()
        deadline = time.monotonic() + 10
        while _start_ticks(engine) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _start_ticks(engine) is None, "the engine outlived its wrapper and the next bakeoff"
        assert any(line.startswith(f"stopped engine pid {wrapper.pid}") for line in lines), lines
    finally:
        if _start_ticks(engine) is not None:
            os.kill(engine, 9)
