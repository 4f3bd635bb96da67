"""A SockJS endpoint for STOMP, so browser clients (sockjs-client with @stomp/stompjs) fall
back to HTTP streaming or polling where WebSockets are blocked.

Implements sockjs-protocol 0.3.3: ``/info``, ``/iframe.html``, the WebSocket transport
(SockJS framing) and raw ``/websocket``, xhr polling, xhr_streaming, eventsource, htmlfile
and jsonp, with ``xhr_send``/``jsonp_send``, CORS with credentials, heart-beats and
``disconnect_delay``.  No JSESSIONID cookie is set (``cookie_needed`` is false); an HTTP
session is bound to its creator's address and JSESSIONID cookie, if it sent one (see
:mod:`.session`).

Each session runs the same ``StompSession`` as TCP over a ``QueuedLink``, so STOMP sees
the same frames; what the session writes waits in the link until a receiving request takes
it, and past the link's high-water mark the session's consumers pause, so a browser that
stops polling leaves messages in their queues.  Send requests are fed in slices (one per
loop turn) and refused over ``max_send_size`` (413); at most ``max_sessions`` HTTP sessions
exist at once, ``max_sessions_per_address`` from one address (503 beyond), and a session
not logged in within ``connect_timeout`` is closed.

Limitation: SockJS carries text.  A message whose body is not valid UTF-8 cannot be
delivered over it: it goes to the dead-letter address with ``_WS_DLQ_REASON`` =
``body-not-text`` and the session carries on.  Binary bodies need ``/stomp`` (WebSocket) or
TCP.
"""

from waystation.gateway.http.sockjs.routes import setup

__all__ = ["setup"]
