"""Attach to any OpenAI-compatible server that bakeoff did not start (``url:`` arms).

Nothing is known about the engine, so nothing is assumed: tokens come from ``usage`` only, the
first event's token count is estimated (and flagged), and no acceptance is read.
"""

from __future__ import annotations

from bakeoff.core import (
    Arm,
    Capabilities,
    CapabilityNotSupported,
    EngineAdapter,
    LaunchInputs,
    LaunchSpec,
    StructuredOutputs,
)

__all__ = ["OpenAICompatAdapter"]


class OpenAICompatAdapter(EngineAdapter):
    name = "openai"
    description = "any OpenAI-compatible server, attach mode only (url:)"
    capabilities = Capabilities(launch_modes=())
    structured = StructuredOutputs(kinds=("json_schema", "tool_call"))  # the server decides

    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        raise CapabilityNotSupported(f"arm {arm.name!r}: engine 'openai' cannot launch anything; give 'url:'")
