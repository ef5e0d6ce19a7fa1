"""Layer 6, engine: the adapter contract, its registry, and launching, attaching to and reading back an engine."""
