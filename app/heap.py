"""Keep the cycle collector off the objects a server holds for its whole life.

CPython's oldest-generation collection walks every tracked object: in ``dpsyn serve`` about
200,000 after the imports and the app are built, many more once the model is loaded. Each
such collection stopped the event loop for 80-125 ms, and at 80 concurrent prompt readers
those pauses alone made the 99th percentile (``bench/load.py``: every client's request of
that moment waits through it). Objects that live as long as the process (modules, the app,
a loaded model) are moved out of the collector's reach with :func:`gc.freeze` once they
exist; what requests allocate afterwards is collected as before.

Only serving processes switch this on (``dpsyn serve``: :func:`enable`); tests and scripts
that build many apps in one process keep the collector as it is, since a frozen object that
later becomes cyclic garbage is never reclaimed.
"""

from __future__ import annotations

import gc
import logging
import time

logger = logging.getLogger(__name__)
_enabled = False


def enable() -> None:
    """Freeze from now on in this process, starting with what exists now."""
    global _enabled
    _enabled = True
    freeze_long_lived()


def disable() -> None:
    """Stop freezing (tests); what is frozen stays frozen until :func:`gc.unfreeze`."""
    global _enabled
    _enabled = False


def freeze_long_lived() -> None:
    """If enabled: collect what is garbage now, then freeze every object still alive.

    Called once the process's long-lived objects exist: after startup, and after a model is
    loaded (:class:`app.llm.provider.BackendProvider`). A collection first, so that garbage of
    the moment is reclaimed rather than frozen."""
    if _enabled:
        started = time.perf_counter()
        gc.collect()
        gc.freeze()
        logger.info(
            "%d long-lived objects kept out of the cycle collector (%.0f ms)",
            gc.get_freeze_count(),
            (time.perf_counter() - started) * 1000,
        )
