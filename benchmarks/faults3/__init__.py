"""The FAULTS-3 probe families for benchmarks/fault_probes.py: one module per family, each with ``probes(srv)``."""
