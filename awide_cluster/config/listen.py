"""Listen addresses (``HOST:PORT``, ``[IPv6]:PORT``) as config files give them.

Parsing lives here, in the config package, so that checking a config file never needs the
API's server; the API imports ``parse_listen`` from here.
"""

from __future__ import annotations


class ListenError(ValueError):
    """A listen address that is not ``HOST:PORT`` (IPv6 as ``[ADDR]:PORT``)."""


def parse_listen(listen: str) -> tuple[str, int]:
    """``"127.0.0.1:9700"`` / ``"[::1]:9700"`` / ``"localhost:0"`` -> (host, port)."""
    text = listen.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ListenError(f"listen address {listen!r}: expected [IPv6]:PORT")
    else:
        host, sep, port = text.rpartition(":")
        if not sep or ":" in host:
            raise ListenError(
                f"listen address {listen!r}: expected HOST:PORT (IPv6 as [ADDR]:PORT)")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ListenError(f"listen address {listen!r}: port must be 0..65535")
    if not host:
        raise ListenError(f"listen address {listen!r}: host missing (use 0.0.0.0 to mean all)")
    return host, int(port)
