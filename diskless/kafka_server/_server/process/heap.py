"""The broker process's start-up heap, kept out of the cyclic garbage collector's full passes.

What the process builds to start (its modules, its configuration, its brokers' state) lives as
long as it does, yet every full collection would walk all of it: over 100,000 objects, tens of
milliseconds with the event loop stalled, each time enough objects have outlived the younger
collections (produce requests waiting for their commit do, under load). `gc.freeze` moves them
into a permanent generation that collections skip; reference counting still frees any of them
that is let go. An embedding application owns its own collector, so only the broker's command
does this, once its brokers serve.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze_start_up_heap() -> int:
    """Collect what starting left behind, then freeze the rest; the objects frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("start-up heap of %d objects frozen out of full collections", frozen)
    return frozen
