"""Small things an operator reads: a bad poll counter never shown above its threshold,
aiohttp's ``ssl:default`` note kept out of a connect error, the catching-up wording naming no
option a screen does not have."""

from __future__ import annotations

import asyncio
import socket

import aiohttp

from awide_cluster.daemon.decision_cards import bad_poll_line
from awide_cluster.store.transport import connect_text


def test_bad_poll_counter_never_above_its_threshold():
    assert bad_poll_line("card s1/c0", 2, 3, "read failed") == \
        "card s1/c0 bad poll 2/3: read failed"
    line = bad_poll_line("card s1/c0", 5, 3, "gone")
    assert "5/3" not in line and "5 bad polls in a row, out after 3" in line, line


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refused_connection_names_no_ssl_default():
    port = _closed_port()

    async def attempt() -> aiohttp.ClientConnectorError:
        async with aiohttp.ClientSession() as session:
            try:
                await session.get(f"http://127.0.0.1:{port}/")
            except aiohttp.ClientConnectorError as e:
                return e
        raise AssertionError("the closed port answered")

    exc = asyncio.run(attempt())
    assert "ssl:" in str(exc)                       # aiohttp's own text has the note
    text = connect_text(exc)
    assert "ssl:" not in text and f"127.0.0.1:{port}" in text, text


def test_an_ssl_context_note_is_removed_too():
    raw = "Cannot connect to host 10.0.0.1:2379 ssl:<ssl.SSLContext object at 0x7f> [Refused]"
    assert connect_text(Exception(raw)) == "Cannot connect to host 10.0.0.1:2379 [Refused]"
