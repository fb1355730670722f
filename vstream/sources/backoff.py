"""Reconnection delays: exponential backoff with jitter.

Jitter spreads the retries of many cameras that dropped at the same moment
(a switch reboot), so they do not all hammer the network at once.
"""

from __future__ import annotations

import random

from vstream.config.sources import ReconnectPolicy


class Backoff:
    """Delays of successive attempts: initial, doubled each time, capped, each jittered."""

    def __init__(self, policy: ReconnectPolicy, rng: random.Random | None = None) -> None:
        self.policy = policy
        self._rng = rng or random.Random()
        self.attempts = 0
        """Attempts in a row since the last success."""

    def next_delay(self) -> float:
        """The wait before the next attempt; counts the attempt."""
        policy = self.policy
        base = min(policy.initial_delay_seconds * 2.0**self.attempts, policy.max_delay_seconds)
        self.attempts += 1
        factor = 1.0 + self._rng.uniform(-policy.jitter, policy.jitter)
        return max(0.0, base * factor)

    @property
    def exhausted(self) -> bool:
        """Whether the policy's limit of attempts in a row has been reached."""
        limit = self.policy.max_attempts
        return limit is not None and self.attempts >= limit

    def reset(self) -> None:
        """A connection worked: the next failure starts from the initial delay again."""
        self.attempts = 0
