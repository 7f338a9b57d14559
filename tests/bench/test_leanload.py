"""The lean load generator frames etcd's answers without decoding them: whole responses only,
by Content-Length or by the chunked terminator, whatever the split of the bytes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bench.leanload import Framer

UNARY = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"
         b'{"a":"b c"}')
CHUNKED = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"b\r\n{\"a\":\"b c\"}\r\n0\r\n\r\n")
REFUSED = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\n\r\n{}"


def test_one_of_each() -> None:
    f = Framer()
    assert f.feed(UNARY + CHUNKED + REFUSED) == [True, True, False]
    assert f.buf == bytearray()


def test_an_incomplete_body_waits() -> None:
    f = Framer()
    assert f.feed(UNARY[:-1]) == []
    assert f.feed(UNARY[-1:]) == [True]


@given(st.lists(st.sampled_from([UNARY, CHUNKED, REFUSED]), max_size=6),
       st.lists(st.integers(min_value=1, max_value=40), max_size=30))
def test_any_split_gives_the_same_responses(answers: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(answers)
    f = Framer()
    got: list[bool] = []
    at = 0
    for n in cuts:
        got += f.feed(stream[at:at + n])
        at += n
    got += f.feed(stream[at:])
    assert got == [a is not REFUSED for a in answers]
