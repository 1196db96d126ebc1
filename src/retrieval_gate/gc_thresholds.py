"""The garbage collector's thresholds in a process the CLI runs.

A verb imports torch, transformers and often vLLM: about a million objects that live as long as
the process. With CPython's default thresholds (700, 10, 10) the collector walked everything
imported so far ten times while they were imported: 2.5-2.8 s of a 17-18 s start (the training
modules and vLLM's engine core, a 2-core Zen 3). With a first generation of 20,000 objects the
same imports need no full collection (1.3 s of collecting in all, the start 14.5-15 s). Cycles
are still collected, at most 20,000 allocations later. Set by `cli.main` (and the test workers),
never on import: a program that imports the library keeps its own settings.

At exit the same million objects were walked once more: the interpreter's last collections,
after the exit handlers, took 0.9-2.6 s of a verb's end (the heap of `tune`, `export`,
`evaluate`; a 2-core Xeon) for objects the process is about to drop anyway. `freeze_at_exit`
moves them into the permanent generation after every other exit handler, so those
collections skip them (Python does not promise `__del__` at exit for what is left then)."""

from __future__ import annotations

import atexit
import gc

FIRST_GENERATION = 20_000


def raise_for_imports() -> None:
    """The first generation's threshold raised to `FIRST_GENERATION` (a higher one is kept)."""
    first, second, third = gc.get_threshold()
    if 0 < first < FIRST_GENERATION:  # 0: the collector's thresholds are off; left so
        gc.set_threshold(FIRST_GENERATION, second, third)


_FREEZE_REGISTERED = False


def freeze_at_exit() -> None:
    """`gc.freeze` as the process's last exit handler (handlers run last-registered first, so
    this one, registered before the verb imports anything that registers its own, runs after
    them: vLLM's engine shutdown unfreezes and collects, the work counters are written)."""
    global _FREEZE_REGISTERED
    if not _FREEZE_REGISTERED:
        atexit.register(gc.freeze)
        _FREEZE_REGISTERED = True
