"""The admin API under ``/admin/api/v1``: queues, messages, connections and bridges, for
operators holding the ``manage`` permission (HTTP Basic with the node's users).

- :mod:`.guard`: login, the ``manage`` check and the audit log;
- :mod:`.routes`: the endpoints, doing their work through :class:`waystation.core.admin.Admin`;
- :mod:`.views`: a message as JSON.
"""

from __future__ import annotations

from waystation.gateway.http.admin.routes import BASE, setup

__all__ = ["BASE", "setup"]
