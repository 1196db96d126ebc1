"""Processes the tests start and kill: whether one is gone."""

from __future__ import annotations


def gone(pid: int) -> bool:
    """No such process, or a zombie (a container's pid 1 may never reap the orphan)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
