"""The one engine a gateway serves, and the refusals of cluster mode (a second engine, a
wipe of the shared cards). ``refused`` is called with the message before it is raised (the
gateway publishes it as a ``refused`` event)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from awide_gateway_cluster.errors import EngineRefused, WipeRefused

log = logging.getLogger("awide_gateway_cluster")


class EngineSlot:
    def __init__(self, gateway_id: str, cluster: str, namespace: str,
                 refused: Callable[[str], None]) -> None:
        self._id, self._cluster, self._namespace = gateway_id, cluster, namespace
        self._refused = refused
        self.name: str | None = None

    def attach(self, name: str) -> None:
        """Bind the one engine this gateway serves; a second one is refused."""
        if not isinstance(name, str) or not name:
            raise ValueError("engine name must be a non-empty string")
        if self.name is not None:
            msg = (f"gateway {self._id} already serves engine {self.name!r}: one engine per "
                   f"gateway, engine {name!r} refused (give it its own gateway)")
            self._refused(msg)
            raise EngineRefused(msg)
        self.name = name
        log.info("engine %s attached to gateway %s", name, self._id)

    def detach(self, name: str) -> None:
        if self.name != name:
            raise EngineRefused(f"engine {name!r} is not the one attached ({self.name!r})")
        self.name = None

    def wipe_refused(self, when: str, *, tell: bool = True) -> WipeRefused:
        """The refusal of a wipe (``when``: on request, at start); with ``tell``, said."""
        msg = (f"wipe refused ({when}): the cards of cluster {self._cluster} are shared "
               f"by every gateway of the cluster (namespace {self._namespace} and others); "
               "a gateway in cluster mode never wipes them")
        if tell:
            self._refused(msg)
        return WipeRefused(msg)
