"""Layer 2, host: facts about the machine a run measures on (CPU load, GPU telemetry, memory bandwidth)."""
