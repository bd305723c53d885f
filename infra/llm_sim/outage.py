"""When the simulated server is down: a scheduled window (`--down-after N --down-for S`) or one
switched on and off over HTTP (`POST /sim/outage {"seconds": S}`; `{"seconds": 0}` ends it).

While down, the chat and models routes answer 503 at once, as a gateway in front of a dead server
does (embeddings, served outside the slots, stay up).

>>> clock = iter([0.0, 0.0, 1.0, 2.5]).__next__
>>> outage = Outage(after=2, seconds=2.0, clock=clock)
>>> [outage.on_request(n) for n in (1, 2, 3)]
[False, False, True]
>>> outage.down(), outage.down()
(True, False)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class Outage:
    """The server's down time: after `after` chat requests, `seconds` down (inf: for good)."""

    def __init__(self, after: int | None = None, seconds: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.after, self.seconds = after, seconds
        self.windows = 0  # outages started
        self._until: float | None = None
        self._clock = clock

    def on_request(self, number: int) -> bool:
        """Note the `number`-th chat request; True when the server is down for it."""
        if self.after is not None and number == self.after + 1:
            self.start(self.seconds)
        return self.down()

    def start(self, seconds: float) -> None:
        """Go down now for `seconds` (inf: until `end`); 0 ends an outage."""
        if seconds <= 0:
            self._until = None
            return
        self._until = math.inf if math.isinf(seconds) else self._clock() + seconds
        self.windows += 1

    def down(self) -> bool:
        """True while an outage lasts."""
        if self._until is not None and self._clock() >= self._until:
            self._until = None
        return self._until is not None
