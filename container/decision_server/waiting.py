"""Waiting for queued work from an async route, without holding a thread, and cancelling
the work when the client goes away (its sequences are freed for the next request)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import Request

from .work import Work

#: How often a waiting request checks that its client is still connected.
POLL_SECONDS = 0.25


async def result_of(work: Work, request: Request) -> Any:
    future = asyncio.wrap_future(work.future)
    while True:
        done, _ = await asyncio.wait({future}, timeout=POLL_SECONDS)
        if done:
            return future.result()
        if await request.is_disconnected():
            work.cancel()
            return await future  # resolves promptly: the scheduler fails cancelled work
