"""Gates: every way of deciding "retrieve or not" (see base.Gate)."""

from .base import Gate, decide

__all__ = ["Gate", "decide"]
