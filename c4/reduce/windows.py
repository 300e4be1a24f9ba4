"""Windows on the shared clock: window ``w`` covers ``[w * W, (w + 1) * W)``, so every edge
of a job cuts its telemetry at the same instants without talking to the others. An event at
exactly a window's end belongs to the next window; a state "at the end of window w" is the
state after every event before ``(w + 1) * W``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NO_END = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Windows:
    """Window arithmetic for one window length (ns)."""

    window_ns: int

    def __post_init__(self) -> None:
        if int(self.window_ns) < 1:
            raise ValueError(f"window_ns must be positive, got {self.window_ns!r}")

    def index(self, t_ns: np.ndarray) -> np.ndarray:
        """The window each time falls in."""
        return np.asarray(t_ns, dtype=np.int64) // self.window_ns

    def closable(self, watermark_ns: int) -> int:
        """The first window that a watermark does not close: windows before it end at or
        before the watermark."""
        return int(watermark_ns) // self.window_ns

    def end(self, w: np.ndarray, stop_ns: int = NO_END) -> np.ndarray:
        """When each window ends, or ``stop_ns`` for a last window cut short by the stream's
        end."""
        return np.minimum((np.asarray(w, dtype=np.int64) + 1) * self.window_ns, stop_ns)
