"""Keep the garbage collector's passes short: in a long-running process, and while a command starts.

After start-up the process holds ~175,000 objects that live until it exits: imported modules, the
SDKs' pydantic models, clients, the config. A full (generation 2) collection scans all of them, and
with 300 turns in flight that pass stopped the event loop for 100–170 ms. ``gc.freeze`` moves what
is alive at that moment out of the collector's view, so later passes scan only what the gateway
created since: the longest loop stall fell to ~60 ms (``python -m benchmarks.concurrency``).

A command-line process starts with no collection at all (:func:`defer_collection`): importing the
provider SDK and the rest makes about a million objects that all live until the process ends, so the
collector's passes during start-up free nothing and took ~0.5 s of the 2.7 s of CPU of
``herald chat -q`` (``python -m benchmarks.cli``). A command that goes on running collects again once
started (:func:`freeze_startup_heap`, or ``gc.enable()``).
"""

from __future__ import annotations

import gc


def defer_collection() -> None:
    """No garbage collection until :func:`freeze_startup_heap` or ``gc.enable()``: for a process's
    start-up only (a short command may run to its end without one)."""
    gc.disable()


def freeze_startup_heap() -> None:
    """Collect once, then exempt every surviving object from future collections, and collect as usual
    from now on. Call once, after start-up and before serving; objects frozen here are never freed, so
    never call it per request."""
    gc.collect()
    gc.freeze()
    gc.enable()
