"""Layer 7, measure: what one timed request is (definitions), and the points it is sent at (depth, streams)."""
