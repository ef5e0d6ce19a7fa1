"""bakeoff: head-to-head speed of LLM inference engines with speculative decoding, from true token counts.

The code lives in :mod:`bakeoff.core` (config, protocol, statistics, reports, CLI) and :mod:`bakeoff.engines`
(the built-in adapters); this package only makes ``python -m bakeoff`` work.
"""
