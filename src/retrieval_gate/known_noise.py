"""Warnings and log lines the user can do nothing about, hidden where they arise. The modules
that start a library name its noise (vLLM's engine in generation.vllm_backend, Lightning's in
training.trainer); these two helpers hide it, every other warning and line shows as before."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager


class LinesStartingWith(logging.Filter):
    """Drops a record whose message begins with one of its logger's known beginnings. A
    logger's filters see only the records made on it, so it is added to each named logger."""

    def __init__(self, by_logger: Mapping[str, tuple[str, ...]]):
        super().__init__()
        self.by_logger = by_logger

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.by_logger.get(record.name, ()))

    def add(self) -> None:
        """Onto each named logger (a filter already there is not added twice)."""
        for name in self.by_logger:
            logging.getLogger(name).addFilter(self)

    def remove(self) -> None:
        for name in self.by_logger:
            logging.getLogger(name).removeFilter(self)


@contextmanager
def warnings_hidden(known: Iterable[tuple[str, type[Warning]]]) -> Iterator[None]:
    """The warnings ignored for the block: (a regex their message starts with, category)."""
    with warnings.catch_warnings():
        for message, category in known:
            warnings.filterwarnings("ignore", message=message, category=category)
        yield
