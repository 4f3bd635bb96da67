"""Reconnect backoff: ``interval x multiplier^n`` capped, for a limited or unlimited number of tries."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``attempts`` = retries allowed after a failure (-1 = forever, 0 = none)."""

    interval: float = 2.0
    multiplier: float = 2.0
    max_interval: float = 60.0
    attempts: int = -1

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` consecutive failed attempts (1 = the first failure)."""
        if failures <= 0:
            return 0.0
        # cap the exponent so a long outage cannot overflow the float
        d = self.interval * self.multiplier ** min(failures - 1, 200)
        return min(d, self.max_interval) if self.max_interval > 0 else d

    def exhausted(self, failures: int) -> bool:
        """True once ``failures`` consecutive failures used up every retry."""
        return self.attempts >= 0 and failures > self.attempts
