"""One log line for an event a flood may repeat thousands of times a second (a connection closed, a refusal held):
the first at once, then at most one every EVERY_S with how many there were since. A line per event cost more than
the event itself and filled the log as fast as the flood came."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

EVERY_S = 10.0


class Tally:
    def __init__(
        self, logger: logging.Logger, level: int, message: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """`message` has one `%d`: the events since the last line."""
        self.logger, self.level, self.message, self.clock = logger, level, message, clock
        self._since = 0
        self._after = float("-inf")

    def add(self) -> None:
        self._since += 1
        if (now := self.clock()) >= self._after:
            self.logger.log(self.level, self.message, self._since)
            self._since, self._after = 0, now + EVERY_S
