"""How an operation reports progress: a callback taking a byte count, whoever displays it."""

from __future__ import annotations

from collections.abc import Callable

# Called with a byte count as work progresses; negative when the transfer manager rewinds a
# retried part.
Advance = Callable[[int], None]
