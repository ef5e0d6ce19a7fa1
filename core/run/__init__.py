"""Layer 8, run: planning a run and driving its arms through passes, locally, on Ray, or against a live box."""
