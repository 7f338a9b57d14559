"""Typed refusals of the gateway library (each message says what was refused and why)."""

from __future__ import annotations


class GatewayError(Exception):
    """Base of the library's refusals."""


class WipeRefused(GatewayError):
    """A wipe of cluster cards was asked for (at start or on request): they are shared."""


class EngineRefused(GatewayError):
    """A second engine tried to attach to a gateway that already serves one."""


class NotStarted(GatewayError):
    """The gateway was used before start() or after stop()."""
