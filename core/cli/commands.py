"""The table of ``bakeoff`` commands: where each lives and the line ``bakeoff --help`` shows for it.

``bakeoff --help`` lists the commands from this table without importing them (the run command alone pulls in
pydantic, httpx, numpy and the whole measurement stack); a command's module is imported when it is invoked.
A unit test checks that each line here is the first paragraph of the command's own docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AFTER_STOP", "COMMANDS", "Command"]


@dataclass(frozen=True)
class Command:
    module: str  # under bakeoff.core.cli
    attr: str  # the command function, or a typer.Typer for a command group
    help: str


COMMANDS: dict[str, Command] = {
    "run": Command("run", "run_command", "Run every arm of a bakeoff file and print the comparison table."),
    "check": Command("check", "check_command", "Check a bakeoff file without engines: every arm on paper, and "
                     "what this machine still lacks to run it."),
    "calibrate": Command("calibrate", "calibrate_command", "Measure the speedup each forced acceptance gives per "
                         "n_max, and the break-even acceptance."),
    "demo": Command("demo", "demo_command", "Run the built-in demo: installs what it needs, then compares the arms "
                    "of the demo file."),
    "schema": Command("schema", "schema_command", "Print a JSON schema: of the bakeoff file (default), of a "
                      "samples.jsonl line, or of summary.json."),
    "report": Command("report", "report_command", "Print a run's verdict (--tables: every table) and write its "
                      "report files."),
    "runs": Command("runs", "runs_command", "List the runs under DIR: state, arms, samples, errors, and how to "
                    "resume an incomplete one."),
    "compare": Command("compare", "compare_command", "Compare each arm's decode rate between two runs (ratio B/A "
                       "with a 95 % interval and a verdict)."),
    "selftest": Command("selftest", "selftest_command", "Run every speculative method ENGINE maps through the "
                        "installed engine, on tiny synthesized models."),
    "promote": Command("promote", "promote_command", "Put an arm of a run on the live endpoint behind a health "
                       "gate; --revert goes back."),
    "gpu": Command("gpu", "gpu_command", "Show the GPUs and the memory bandwidth the roofline would use; changes "
                   "nothing."),
    "gate": Command("regression", "gate_command", "Run a regression gate: the gate: section's reference and candidate "
                    "builds, interleaved and paired on this machine, and judge whether the candidate is slower than "
                    "allowed."),
    "bundle": Command("bundle", "bundle_command", "Pack a run into one file: the run directory, a manifest of "
                      "SHA-256 hashes, each arm's configuration fingerprint and engine build, and the rig report of "
                      "the machine that ran it. Secrets are masked."),
    "verify": Command("bundle", "verify_command", "Check a bundle: every file against the manifest's SHA-256, no "
                      "file added or missing, run.json, the samples, fingerprints and builds consistent, no "
                      "credential-shaped text. Exit 0 when it verifies."),
    "merge": Command("merge", "merge_command", "Merge verified bundles into one report: each run's arms with their "
                     "own paired comparisons, and arms with the same configuration fingerprint on other hardware "
                     "compared as hardware (unpaired, labelled)."),
    "export": Command("export", "export_command", "Write a run as flat tables: samples (one row per request, the "
                      "arm's settings as columns) and points (one row per arm and measured point: median, interval, "
                      "paired ratio and verdict), or the community table row."),
    "tune": Command("tune", "tune_command", "Race speculative settings against spec-off within a time budget, verify "
                    "the winner under changing load, and compile it for the engine."),
    "conform": Command("conform", "conform_command", "Check a server's token, cache and acceptance counters with a "
                       "fixed battery: each check pass, fail or n/a."),
    "capacity": Command("capacity", "capacity_command", "Find each arm's highest load at which the capacity: "
                        "section's SLOs hold, paired across arms."),
    "engines": Command("engines", "app", "List engines, or install one."),
}

# What still holds after Ctrl-C or a write failure, and the way on (the boundary's one line says it).
AFTER_STOP = {
    "run": "engines stopped; samples stored so far are kept; `bakeoff run --resume RUN_DIR` finishes the run",
    "calibrate": "engines stopped; samples stored so far are kept; `bakeoff run --resume RUN_DIR` finishes the run",
    "demo": "engines stopped",
    "gate": "engines stopped; samples stored so far are kept; `bakeoff run --resume RUN_DIR` finishes the run, "
            "then run the gate again",
}
