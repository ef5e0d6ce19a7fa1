"""Layer 3, config: the bakeoff file as typed models, read from YAML and expanded (sweeps, calibration) on paper."""
