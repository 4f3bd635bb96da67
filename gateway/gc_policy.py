"""The cyclic garbage collector's schedule for a running node.

Why: a message's life allocates a handful of container objects (the message, its reference,
dicts), so with CPython's default first-generation threshold of 700 the collector ran every
hundred or so messages, and each older-generation pass walked every message still queued.
Profiles of the STOMP benchmarks put about a third of the event loop's time in ``gc``.
Messages hold no reference cycles on their way through; what cycles exist are made at
start (modules, config, listeners) and by connections coming and going.  So: objects alive
once the node is up are frozen out of collection for good, and the first generation is
collected every :data:`GEN0` allocations instead of 700.  Memory held by garbage cycles
is bounded by that count; the collector still runs.
"""

from __future__ import annotations

import gc

GEN0 = 50_000  # container allocations (net) between first-generation collections
GEN1 = 20  # first-generation collections between second-generation ones
GEN2 = 10  # second-generation collections between full ones (CPython also waits for growth)


def tune_for_serving() -> None:
    """Call once the node is started: freeze what start made, and collect less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GEN0, GEN1, GEN2)


__all__ = ["GEN0", "tune_for_serving"]
