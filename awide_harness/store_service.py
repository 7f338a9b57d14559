"""A tiny real "store service" for one directory card of the embedded cluster.

It listens on ``HOST:PORT`` and answers every connection with one line
``awide-store <card> ok`` before closing it, so the daemon's ``store: {tcp: HOST:PORT}`` probe
sees it alive. Killing the process is the card's store dying; starting it again on the same
port is the store coming back.

Standard library only, so it starts in milliseconds with ``python -S``::

    python -S store_service.py --port 41234 --card s1/c0 --dir /tmp/work/cards/s1/c0

(``--dir`` is informational: it puts the work dir into the command line, which is how the
harness and its tests find any process left behind.) SIGTERM/SIGINT stop it with exit 0.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys

LINE = "awide-store {card} ok\n"


def listener(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    return sock


def serve(sock: socket.socket, card: str) -> None:
    """Answer connections until the process is told to stop."""
    reply = LINE.format(card=card).encode()
    while True:
        conn, _ = sock.accept()
        try:
            conn.settimeout(0.5)
            conn.sendall(reply)
        except OSError:
            pass
        finally:
            conn.close()


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--card", default="card")
    ap.add_argument("--dir", default="")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        sock = listener(args.host, args.port)
    except OSError as exc:
        print(f"store service {args.card}: cannot listen on {args.host}:{args.port}: {exc}",
              file=sys.stderr)
        return 1
    print(f"store service {args.card} listening on {args.host}:{args.port}", flush=True)
    try:
        serve(sock, args.card)
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
