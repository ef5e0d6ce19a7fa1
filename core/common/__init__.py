"""Layer 1, common: the error tree, secret masking and text helpers that every other layer may use."""
