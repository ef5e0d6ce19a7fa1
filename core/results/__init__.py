"""Layer 4, results: the Sample and run record schemas and the run directory that stores them."""
