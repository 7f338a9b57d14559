"""Fixtures of the card tests."""

from __future__ import annotations

import asyncio

import pytest


@pytest.fixture
async def listener():
    """A loopback port that accepts and closes (a card's store service, as a probe sees it)."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
