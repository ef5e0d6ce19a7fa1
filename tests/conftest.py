"""Test-wide guard: no process started during a test may outlive it (issue 5: nothing left behind).

Every process a test starts, directly or through ``bakeoff run`` and its engines, inherits this
session's tag in its environment, so a leaked engine is found even after its parent died and it was
re-parented. After each test the tagged processes that are new are given a short grace to exit; any
still alive are killed by pid and the test fails, naming them. Linux only (/proc); a no-op elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pluggy
import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))  # hostile_server, importable from every tier
from hostile_server import HostileServer

if TYPE_CHECKING:
    from bakeoff.core.engine.contract import EngineAdapter

# The tests read tables and long lines whole: they run 200 columns wide, as bakeoff piped once did by default (80
# today); tests/unit/cli/test_screen_width.py holds every command's default output to 80 columns
os.environ.setdefault("COLUMNS", "200")

TAG = "BAKEOFF_TEST_SESSION"
os.environ.setdefault(TAG, f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
# Running-engine records of this session stay in its own directory, never in the user's cache
os.environ.setdefault("BAKEOFF_RUNNING_DIR", f"/tmp/bakeoff-test-running-{os.environ[TAG]}")
_PROC = Path("/proc")


def tagged_processes() -> dict[int, str]:
    """Live processes (not zombies) carrying this session's tag, other than pytest itself: pid -> cmdline."""
    marker = f"{TAG}={os.environ[TAG]}".encode()
    found: dict[int, str] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            if stat[stat.rfind(")") + 2] in "ZX":
                continue
            if marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        found[int(entry.name)] = cmdline
    return found


def _survivors(pids: set[int], grace_s: float) -> dict[int, str]:
    deadline = time.monotonic() + grace_s
    while True:
        alive = {pid: cmd for pid, cmd in tagged_processes().items() if pid in pids}
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def _kill(pids: dict[int, str]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(autouse=True)
def no_orphan_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that leaves a process it started (an engine, a bakeoff run) alive. A module marked
    ``shared_processes(prefix)`` shares a fixture whose own workers start during a test and stay for the next (a Ray
    cluster's ``ray::`` workers): those are left to the fixture's teardown and the session-end check."""
    if not _PROC.is_dir():
        yield
        return
    marker = request.node.get_closest_marker("shared_processes")
    shared = tuple(marker.args) if marker else ()
    before = set(tagged_processes())
    yield
    new = {pid for pid, cmd in tagged_processes().items()
           if pid not in before and not (shared and cmd.startswith(shared))}
    left = _survivors(new, grace_s=5.0)
    if left:
        _kill(left)
        pytest.fail("processes started during this test are still alive (killed now): "
                    + "; ".join(f"pid {pid}: {cmd[:160]}" for pid, cmd in sorted(left.items())), pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def no_orphans_at_session_end() -> Iterator[None]:
    """The same check once more after module and session fixtures (shared engines) are torn down."""
    yield
    if _PROC.is_dir():
        left = _survivors(set(tagged_processes()), grace_s=5.0)
        if left:
            _kill(left)
            pytest.fail("processes started by the tests outlived the session (killed now): "
                        + "; ".join(f"pid {pid}: {cmd[:160]}" for pid, cmd in sorted(left.items())), pytrace=False)


@pytest.fixture
def live_test_processes() -> Callable[[], dict[int, str]]:
    """The orphan guard's view: live processes started by this test session (pid -> cmdline)."""
    return tagged_processes


@pytest.fixture(scope="session")
def hostile_server() -> Iterator[HostileServer]:
    """A lying, trickling, bursting OpenAI-compatible server on 127.0.0.1 (tests/fixtures/hostile_server.py);
    ``hostile_server.url(mode)`` is an attach-mode base URL."""
    with HostileServer() as srv:
        yield srv


# -- the real-engine tier cannot skip silently in CI (AUDIT H3) -----------------------------------------------
REAL_ENGINE_MARKERS = ("integration", "vllm")  # tests that need llama-server, vLLM or Chromium
_REAL_ENGINE_LINE = pytest.StashKey[str]()


# A launch command a fake gives instead of the sim server's: a list, or built from the arm and the launch inputs
FakeArgv = list[str] | Callable[[Any, Any], list[str]]


class FakeAdapterFactory(Protocol):
    def __call__(self, name: str = "fake", *, argv: FakeArgv | None = None, **declared: Any) -> EngineAdapter: ...


@pytest.fixture
def fake_adapter() -> FakeAdapterFactory:
    """The unit tests' one fake engine: the sim's adapter (engines/sim) under another name, with what a test declares.

    ``fake_adapter(name, capabilities=..., reader=..., ...)`` gives an instance of a subclass of ``SimAdapter`` whose
    class attributes are the ones given (declarations, not state: the contract keeps none on the adapter), so the
    shortest fake is the sim itself and every other is the sim with one declaration changed. ``argv`` replaces the
    sim server's command line where a test launches something else, or nothing (``["true"]``).
    """
    from bakeoff.core.engine.contract import LaunchSpec
    from bakeoff.engines.sim import SimAdapter

    def make(name: str = "fake", *, argv: FakeArgv | None = None, **declared: Any) -> EngineAdapter:
        body: dict[str, Any] = {"name": name, **declared}
        if argv is not None:
            command = argv

            def launch_spec(self: EngineAdapter, arm: Any, launch: Any) -> LaunchSpec:
                return LaunchSpec(argv=command(arm, launch) if callable(command) else list(command))

            body["launch_spec"] = launch_spec
        adapter: EngineAdapter = type(f"Fake_{name.replace('-', '_')}", (SimAdapter,), body)()
        return adapter

    return make


def _needs_real_engine(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) is not None for m in REAL_ENGINE_MARKERS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    """Under CI=true a skipped real-engine test is a failure: a missing engine must not pass unnoticed."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI", "").lower() in ("1", "true", "yes") and _needs_real_engine(item):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which needs every real-engine test to run: {reason}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The last line says how many tests ran against a real engine (llama-server, vLLM, Chromium)."""
    counts: dict[str, set[str]] = {"passed": set(), "failed": set(), "skipped": set()}
    for key, bucket in (("passed", "passed"), ("failed", "failed"), ("error", "failed"), ("skipped", "skipped")):
        for r in terminalreporter.stats.get(key, []):
            if any(m in getattr(r, "keywords", {}) for m in REAL_ENGINE_MARKERS) \
                    and (key != "passed" or r.when == "call"):
                counts[bucket].add(r.nodeid)
    counts["passed"] -= counts["failed"]  # a test that passed but failed teardown counts once, as failed
    terminalreporter.config.stash[_REAL_ENGINE_LINE] = (
        f"real-engine tests (integration/vllm markers): {len(counts['passed'])} passed, "
        f"{len(counts['failed'])} failed, {len(counts['skipped'])} skipped")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Written after pytest's own summary, so it is the last line of the test command's output."""
    line = config.stash.get(_REAL_ENGINE_LINE, None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if line and reporter is not None:
        reporter.write_line(line)
