"""A tiny progress line on stderr: group, case i/n, elapsed time and ETA."""

from __future__ import annotations

import sys
import time


def format_seconds(s: float) -> str:
    """``75`` -> ``1m15s``; ``3700`` -> ``1h01m``."""
    s = max(0, int(round(s)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


class Progress:
    """Redraws one line in a terminal; writes one line per step elsewhere (logs).

    The ETA assumes the remaining steps cost what the finished ones did on average.
    """

    def __init__(self, total: int, stream=None, clock=time.monotonic):
        self.total = max(total, 0)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._width = 0

    def line(self, what: str) -> str:
        elapsed = self.clock() - self.start
        eta = (elapsed / self.done * (self.total - self.done)) if self.done else None
        frac = self.done / self.total if self.total else 1.0
        bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
        return f"[{bar}] {self.done}/{self.total} {what}  {format_seconds(elapsed)}" + (
            f", ETA {format_seconds(eta)}" if eta is not None else ""
        )

    def show(self, what: str):
        """Shows ``what`` (the step now running) without counting it as done."""
        text = self.line(what)
        if self.tty:
            self.stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def step(self, n: int = 1):
        self.done = min(self.total, self.done + n)

    def close(self):
        """Shows the final count and the total time."""
        self.show("done")
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
