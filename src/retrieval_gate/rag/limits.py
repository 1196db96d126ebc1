"""What one request to the service may ask and how long it may wait (torch- and
fastapi-free, so `serve` checks its flags before importing the server or starting an engine)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ..errors import ConfigError

# A count limit past this is "no limit" in practice, and past 2**63 pydantic could not build
# the request model from it (`--max-question-chars 10**24` was an internal error).
MAX_COUNT = 2**31 - 1


@dataclass(frozen=True)
class Limits:
    """What one request may ask and how long it may wait; each field is a `serve` flag."""

    max_questions: int = 64  # per request
    max_question_chars: int = 1000  # short-form questions
    max_body_bytes: int = 1 << 20  # 64 questions of 1,000 escaped characters fit
    # questions per engine (or gate) call: larger batches raise a GPU's throughput; on a CPU,
    # where prompt processing dominates, smaller ones answer the first requests sooner
    max_batch: int = 16
    max_backlog: int = 256  # questions waiting for the engine before 429
    # seconds from arrival to answer, queue included; a request expected to wait longer at
    # the measured rate is refused at once (429) rather than left to time out (504)
    request_timeout: float = 120.0

    def check(self, heaviest: int = 1) -> None:
        """Refuses a limit that is not positive (or not finite), or a count past `MAX_COUNT`,
        naming its flag; and a backlog that cannot hold one full request, `heaviest`: what
        the dearest question weighs (a multi-step one: its --max-steps steps), since a request
        that can never fit was told "retry" (429) forever."""
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{flag} must be a positive number, got {value}")
            if isinstance(value, int) and value > MAX_COUNT:
                raise ConfigError(f"{flag} must be at most {MAX_COUNT:,}, got {value:,}")
        if self.max_backlog < self.max_questions:
            raise ConfigError(
                f"--max-backlog ({self.max_backlog}) must hold one full request "
                f"(--max-questions {self.max_questions})"
            )
        full = self.max_questions * heaviest
        if full > self.max_backlog:
            raise ConfigError(
                f"--max-backlog ({self.max_backlog}) must hold one full request: "
                f"--max-questions {self.max_questions} multi-step questions of {heaviest} steps "
                f"(--max-steps; a question counts as its steps) weigh {full}; pass "
                f"--max-backlog {full}, or a lower --max-steps"
                + (f" or --max-questions {fit}" if (fit := self.max_backlog // heaviest) else "")
            )
