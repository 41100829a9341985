"""Streaming responses: server-sent events, and several generations interleaved as their steps
arrive.

Both generation routes stream ``data: {...}`` chunks, then ``data: [DONE]``, as OpenAI does.
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from .engine import GenerationStep

# Events leave as they are generated: no client caches them, no proxy buffers them (nginx
# honours X-Accel-Buffering).
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(payload: dict[str, Any]) -> str:
    """One server-sent event carrying ``payload`` as compact JSON."""
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


# The last event of every stream, after the chunks (or the error).
SSE_DONE = "data: [DONE]\n\n"


async def _cancel_all(tasks: Sequence["asyncio.Task[None]"]) -> None:
    for task in tasks:
        task.cancel()
    # Cancelled first, awaited second: if this await is itself cancelled (the client left), the
    # tasks still unwind and abort their generations.
    await asyncio.gather(*tasks, return_exceptions=True)


async def interleave(
    streams: Sequence[AsyncGenerator[GenerationStep, None]],
) -> AsyncGenerator[tuple[int, GenerationStep], None]:
    """Yield ``(index, step)`` from several generations in the order steps arrive, so a
    multi-prompt completion streams as fast as its fastest prompt."""
    if len(streams) == 1:
        async with contextlib.aclosing(streams[0]) as stream:
            async for step in stream:
                yield 0, step
        return

    queue: asyncio.Queue[tuple[int, GenerationStep | Exception | None]] = asyncio.Queue()

    async def pump(index: int, stream: AsyncGenerator[GenerationStep, None]) -> None:
        try:
            async with contextlib.aclosing(stream):
                async for step in stream:
                    await queue.put((index, step))
        except Exception as exc:
            await queue.put((index, exc))
        else:
            await queue.put((index, None))

    tasks = [asyncio.create_task(pump(index, stream)) for index, stream in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            index, item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item
    finally:
        await _cancel_all(tasks)
