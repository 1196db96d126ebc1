"""What a service has done since it started: the strategies it routed questions to (realised
retrieval rate and mean cost per question in the router's unit) and the measured cost of the
questions it answered (retrieval requests, LLM calls and seconds per question). `/health`
reports it; thread-safe, since requests finish on the event loop and in worker threads."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..strategies import BUILTIN, StrategyRegistry


class Traffic:
    """Counters since start; `costs` prices each strategy (`strategies.strategy_costs`)."""

    def __init__(self, costs: Mapping[str, float], unit: str = "retrievals",
                 strategies: StrategyRegistry = BUILTIN):  # fmt: skip
        self.costs, self.unit = dict(costs), unit
        self.retrieving = {s.name for s in strategies if s.retrieves}
        self.since = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self._lock = threading.Lock()
        self._routed: Counter[str] = Counter()
        self._answered = Counter({"questions": 0, "retrievals": 0, "llm_calls": 0})
        self._seconds = 0.0

    def routed(self, strategies: Sequence[str]) -> None:
        with self._lock:
            self._routed.update(strategies)

    def answered(self, questions: int, retrievals: int, llm_calls: int, seconds: float) -> None:
        with self._lock:
            self._answered.update(questions=questions, retrievals=retrievals,
                                  llm_calls=llm_calls)  # fmt: skip
            self._seconds += seconds

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            routed, answered, seconds = dict(self._routed), dict(self._answered), self._seconds
        n = sum(routed.values())
        cost = sum(self.costs.get(s, 0.0) * c for s, c in routed.items())
        done = answered["questions"]
        return {
            "since": self.since,
            "routed": {
                "questions": n,
                "by_strategy": routed,
                "retrieval_rate": sum(c for s, c in routed.items() if s in self.retrieving) / n
                if n
                else None,
                "mean_cost": cost / n if n else None,
                "cost_unit": f"{self.unit} ({', '.join(f'{s} {c:g}' for s, c in self.costs.items())})",
            },
            "answered": {
                "questions": done,
                "retrievals_per_question": answered["retrievals"] / done if done else None,
                "llm_calls_per_question": answered["llm_calls"] / done if done else None,
                "seconds_per_question": seconds / done if done else None,
            },
        }
