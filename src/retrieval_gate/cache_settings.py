"""The generation cache's settings from the environment: `$RETRIEVAL_GATE_NO_CACHE` (set by
`--no-cache`) and `$RETRIEVAL_GATE_CACHE_MB` (its size bound). Apart from the store
(`generation/cache.py`), so that every verb checks them when it starts without importing the
generation package (about 35 ms of a 0.25 s start)."""

from __future__ import annotations

import math
import os

from .errors import ConfigError

NO_CACHE_ENV = "RETRIEVAL_GATE_NO_CACHE"
SIZE_ENV = "RETRIEVAL_GATE_CACHE_MB"
DEFAULT_MB = 1024
# the values of $RETRIEVAL_GATE_NO_CACHE that turn the cache off, and those that leave it on
CACHE_OFF, CACHE_ON = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def cache_enabled() -> bool:
    """False under `--no-cache` (which sets `RETRIEVAL_GATE_NO_CACHE=1` for the process and the
    verbs it starts)."""
    return os.environ.get(NO_CACHE_ENV, "").strip().lower() not in CACHE_OFF


def check_cache_settings() -> None:
    """The cache's environment variables, checked when a verb starts: read where the store
    opens, a bad one stopped a run after its model was prepared."""
    value = os.environ.get(NO_CACHE_ENV, "").strip().lower()
    if value not in CACHE_OFF + CACHE_ON:
        raise ConfigError(f"${NO_CACHE_ENV} is {value!r}: set 1 (no cache) or 0, or unset it")
    max_bytes()


def max_bytes() -> int:
    """The store's bound in bytes: $RETRIEVAL_GATE_CACHE_MB megabytes (0 or more), else 1 GB."""
    raw = os.environ.get(SIZE_ENV)
    try:
        mb = float(raw) if raw else DEFAULT_MB
    except ValueError:
        mb = math.nan
    if not 0 <= mb < math.inf:  # NaN too
        raise ConfigError(f"${SIZE_ENV} must be a number of megabytes, 0 or more, got {raw!r}")
    return int(mb * 1024 * 1024)
