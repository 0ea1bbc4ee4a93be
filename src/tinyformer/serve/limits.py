"""What one playground server allows (`tinyformer serve --max-*`), importable without its web packages, so
that the command line can show the defaults without FastAPI installed; and the generation slots, which a
request waits for without holding a thread."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio


@dataclass(frozen=True)
class Limits:
    max_body: int = 65_536  # bytes of a request body
    max_tokens: int = 1_000  # tokens one generate request may ask for
    max_generations: int = 4  # generations running at once; more wait for a slot
    wait_s: float = 30.0  # how long a request waits for a slot before a 503


class Slots:
    """At most `n` generations at once. A request waits for a slot as a future on its event loop, not in a
    worker thread: a hundred waiting requests leave every thread to the others (`/api/runs` answers at once).
    A slot freed goes to the longest waiter, from any thread or event loop."""

    def __init__(self, n: int) -> None:
        self.free = n
        self.waiting: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = deque()
        self.lock = threading.Lock()

    async def acquire(self, timeout: float) -> bool:
        """Take a slot (True), or give up after `timeout` seconds (False)."""
        import asyncio  # here, not at the top: `tinyformer --help` reads the limits, and asyncio costs 40 ms

        loop = asyncio.get_running_loop()
        with self.lock:
            if self.free > 0 and not self.waiting:
                self.free -= 1
                return True
            me = (loop, loop.create_future())
            self.waiting.append(me)
        try:
            await asyncio.wait_for(asyncio.shield(me[1]), timeout)
            return True
        except BaseException as e:  # the time is up, or the request was cancelled (its client left)
            with self.lock:
                granted = me not in self.waiting
                if not granted:
                    self.waiting.remove(me)
            if granted:  # a slot was handed over as we gave up: pass it on
                self.release()
            if isinstance(e, TimeoutError):
                return False
            raise

    def release(self) -> None:
        with self.lock:
            if not self.waiting:
                self.free += 1
                return
            loop, future = self.waiting.popleft()
        loop.call_soon_threadsafe(_grant, future)


def _grant(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(True)
