"""Layer 5, analysis: statistics over stored samples (medians, paired ratios, acceptance, fairness, decisions)."""
