"""Client-side I/O helpers: reach a Waystation node from Python code.

:func:`open_tunnel_connection` opens a stream (STOMP by default) through the node's HTTP
tunnel, optionally via a forward proxy that allows neither CONNECT nor WebSocket.
"""

from waystation.client.tunnel import TunnelError, open_tunnel_connection

__all__ = ["TunnelError", "open_tunnel_connection"]
