"""The bounds of the bakeoff file's fields that size work, in one place.

Each lies far above any real bakeoff and low enough that what passes it can run: bakeoff builds an open-loop
schedule, a batch of streams or the synthetic sessions whole in memory, sleeps until a due time, and hands
launch numbers to engines that read them as 32-bit integers. A value within every single bound could still
multiply past them (a rate times a duration, sessions times turns times words), so those products are
bounded too. Each bound is checked where its field is declared (core/config/schema.py, core/config/live.py)
and the error names it; ``bakeoff check``, ``bakeoff run`` and the Python API read files through the same
models, so they refuse the same values with the same words.
"""

from __future__ import annotations

__all__ = ["MAX_ARMS", "MAX_COUNT", "MAX_DAY_S", "MAX_DRAFT_TOKENS", "MAX_RATE", "MAX_REQUESTS", "MAX_STREAMS",
           "MAX_SYNTHETIC_WORDS", "MAX_TOKENS", "MAX_WEEK_S"]

MAX_TOKENS = 10_000_000  # output tokens, prompt depths, a context or a batch in tokens: beyond any model's context
MAX_STREAMS = 10_000  # simultaneous streams or slots: each stream is a client thread and a connection
MAX_REQUESTS = 1_000_000  # requests of one open-loop point: its schedule is drawn whole before it starts
MAX_RATE = 1_000_000.0  # requests per second of an open-loop point
MAX_DAY_S = 86_400  # durations and timeouts, and the span of an open-loop schedule
MAX_WEEK_S = 7 * 86_400  # deadlines over a whole run (a tuning budget, a watchdog)
MAX_SYNTHETIC_WORDS = 10_000_000  # words all synthetic sessions hold together (they are built on every read)
MAX_ARMS = 1_000  # arms a sweep, a tuning space or a calibration section makes: each is a launch per pass
MAX_DRAFT_TOKENS = 1_024  # draft tokens per speculative step
MAX_COUNT = 2**31 - 1  # threads, parallel sizes: engines parse their launch flags as 32-bit integers
