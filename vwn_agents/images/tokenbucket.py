"""A token bucket: throttles a byte stream to a rate (bytes per second) with a bounded burst.

The CE agent tells a node agent to pull an image at the bandwidth the lease engine scheduled
for its transfer (seed 000 Section 6.2: the transfer reservation's length is image size /
bandwidth); the node reads the download through ``TokenBucket.take`` so that the bytes arrive
no faster than that (TCP flow control then slows the repository's sender). Classic token bucket
(Turner 1986; the shaping of RFC 2697/2698): tokens accrue at ``rate`` per second up to
``burst``; taking ``n`` bytes waits until ``n`` tokens are there (``n`` larger than ``burst`` is
taken in ``burst``-sized pieces). The clock and the sleep are passed in (``time.monotonic`` and
``time.sleep`` by default: a duration source, not the wall clock), so tests drive it with a
fake clock.
"""
from __future__ import annotations

import time


class TokenBucket:
    """``rate``: bytes per second (> 0; ``float("inf")`` = no limit); ``burst``: the most
    bytes that may pass at once after an idle period (default: a tenth of a second of rate, at
    least 64 KiB). ``monotonic()`` -> seconds, ``sleep(s)``. ValueError for rate <= 0 or
    burst <= 0. Not thread-safe (one bucket per download)."""

    def __init__(self, rate: float, burst: float | None = None, monotonic=time.monotonic,
                 sleep=time.sleep) -> None:
        if not rate > 0:
            raise ValueError(f"token bucket rate must be > 0 bytes/s, got {rate}")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(65536.0, self.rate / 10))
        if not self.burst > 0:
            raise ValueError(f"token bucket burst must be > 0 bytes, got {burst}")
        self._monotonic = monotonic
        self._sleep = sleep
        self._tokens = 0.0          # start empty: the first bytes are paced too (no initial burst)
        self._last = monotonic()
        self.waited_s = 0.0         # total time spent waiting for tokens (s)

    def _refill(self) -> None:
        now = self._monotonic()
        if now > self._last:
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def take(self, n: int) -> None:
        """Wait until ``n`` bytes may pass (returns at once for an unlimited bucket)."""
        if self.rate == float("inf"):
            return
        left = float(n)
        while left > 0:
            piece = min(left, self.burst)
            self._refill()
            short = piece - self._tokens
            if short > 1e-9 * piece:
                wait = short / self.rate
                self.waited_s += wait
                self._sleep(wait)
                self._refill()
                # a sleep that returned early: go round again (a shortfall within rounding of
                # the clock's resolution is not one, else a fine clock could loop for ever)
                if piece - self._tokens > max(1e-6 * piece, self.rate * 1e-6):
                    continue
            self._tokens = max(0.0, self._tokens - piece)
            left -= piece
