"""sd_notify without a dependency: READY=1, WATCHDOG=1, STATUS=, STOPPING=1 over NOTIFY_SOCKET.

systemd (``Type=notify``, ``WatchdogSec=``) gives the daemon a unix datagram socket in
``NOTIFY_SOCKET``; a leading ``@`` names a socket in the abstract namespace. With no
``NOTIFY_SOCKET`` (not under systemd, or a test) every call is a no-op.

Watchdog pings must come from the daemon's main loop only (one ``watchdog()`` per loop turn):
a stalled loop then stops them and systemd restarts the daemon. ``watchdog_interval()`` reads
``WATCHDOG_USEC`` (honouring ``WATCHDOG_PID``) so the loop can check its poll fits in it.

Sending never blocks and never raises: a notification that cannot be delivered is counted in
``failures`` and its error kept in ``last_error`` (systemd not listening must not stop the
daemon).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping


class NotifyError(ValueError):
    """A malformed NOTIFY_SOCKET value or notification field."""


def socket_address(value: str) -> str | bytes:
    """The ``sendto`` address for a NOTIFY_SOCKET value (``@name`` -> abstract namespace)."""
    if not value:
        raise NotifyError("NOTIFY_SOCKET is empty")
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if not value.startswith("/"):
        raise NotifyError(f"NOTIFY_SOCKET {value!r} is neither an absolute path nor @abstract")
    return value


def format_message(fields: Mapping[str, str | int]) -> bytes:
    """``{"READY": 1, "STATUS": "polling"}`` -> ``b"READY=1\\nSTATUS=polling"``.

    A value spanning several lines is joined into one (a STATUS built from an error message
    must not break the protocol).
    """
    lines = []
    for key, value in fields.items():
        text = " ".join(str(value).splitlines())     # a value is one line
        if not key or not key.isupper() or "=" in key:
            raise NotifyError(f"notification field {key!r} is not an upper-case name")
        lines.append(f"{key}={text}")
    return "\n".join(lines).encode()


class Notifier:
    """Talks to systemd's notification socket; a no-op when there is none."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        raw = env.get("NOTIFY_SOCKET", "")
        self._address = socket_address(raw) if raw else None
        self._env = dict(env)
        self._sock: socket.socket | None = None
        self.sent = 0
        self.failures = 0
        self.last_error = ""

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def watchdog_interval(self) -> float | None:
        """Seconds systemd allows between two WATCHDOG=1, or None when no watchdog is asked."""
        usec = self._env.get("WATCHDOG_USEC", "")
        pid = self._env.get("WATCHDOG_PID", "")
        if not usec.isdigit() or int(usec) == 0:
            return None
        if pid and pid != str(os.getpid()):
            return None
        return int(usec) / 1_000_000

    def notify(self, **fields: str | int) -> bool:
        """Send one notification; True if it was delivered (False also when disabled)."""
        if self._address is None:
            return False
        message = format_message(fields)
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.setblocking(False)
            self._sock.sendto(message, self._address)
        except OSError as e:
            self.failures += 1
            self.last_error = f"{type(e).__name__}: {e}"
            return False
        self.sent += 1
        return True

    def ready(self, status: str | None = None) -> bool:
        return self._state("READY", status)

    def watchdog(self) -> bool:
        """One watchdog ping. Call it from the main loop only, once per turn."""
        return self.notify(WATCHDOG=1)

    def status(self, text: str) -> bool:
        return self.notify(STATUS=text)

    def stopping(self, status: str | None = None) -> bool:
        return self._state("STOPPING", status)

    def _state(self, state: str, status: str | None) -> bool:
        """``state=1`` (READY, STOPPING), with ``STATUS`` when given, in one datagram."""
        fields: dict[str, str | int] = {state: 1}
        if status is not None:
            fields["STATUS"] = status
        return self.notify(**fields)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
