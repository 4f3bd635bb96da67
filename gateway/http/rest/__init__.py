"""REST messaging over HTTP, following the HornetQ REST chapter.

Only ``/queues/{name}`` (the anycast queue, STOMP ``/queue/name``) and ``/topics/{name}``
(the multicast address, STOMP ``/topic/name``) are published; every other URL is a link
(``msg-*`` headers, or one ``Link`` header with ``use_link_headers``).  Modules, one idea
each:

- :mod:`.destinations`: discovery (``HEAD``/``GET``) and ``POST /queues`` / ``/topics``;
- :mod:`.producer`: posting messages, duplicate-safe posting;
- :mod:`.pull`, :mod:`.consumers` and :mod:`.pulling`: pull consumers and subscriptions, auto and manual
  acknowledgement, ``Accept-Wait``, the idle reaper; :mod:`.substore`: which durable
  subscriptions REST made;
- :mod:`.registration`, :mod:`.push`, :mod:`.pushes` and :mod:`.pushstore`: push
  registrations (webhooks), delivery with retries, the durable store;
- :mod:`.mapping`: HTTP headers <-> message properties, body and Content-Type;
- :mod:`.names`, :mod:`.xmldoc`: which names are served, safe XML parsing;
- :mod:`.links`, :mod:`.auth`, :mod:`.errors`: URLs, HTTP Basic -> Principal, status codes;
- :mod:`.sessions`: the session model.  REST reaches the engine only through core sessions
  (DESIGN §7): one per pull consumer or subscription and one per push registration, acting
  for the user who made it and closed with it, plus one request session per user for sends,
  discovery and queue/topic creation.  Every permission and limit is checked there.

Status codes: 200 found / message; 201 created; 204 deleted; 307 to a duplicate-safe create
URL; 400 bad parameter, selector or XML (the text says which); 401 credentials (with
``WWW-Authenticate``); 403 permission; 404 unknown destination or resource; 405 wrong method;
409 name taken (or a durable subscription's selector differs); 412 stale consumer link (with the right one); 413 body over
``max_body_size``; 503 no message yet (``Retry-After``), address full (FAIL policy), too
many consumers (``max_consumers``, or ``max_consumers_per_user`` / ``_per_address``: the
text names which), a core limit (``max_sessions_per_user``, ``max_auto_created`` ...: the
text ends ``(limit <name>)``) or the server stopping; 507 a durable registration or subscription could not
be stored.
"""

from __future__ import annotations

from aiohttp import web

from waystation.gateway.http.context import HttpContext
from waystation.gateway.http.rest import consumers, destinations, producer, pulling, pushes
from waystation.gateway.http.rest.pull import Owners, Registry
from waystation.gateway.http.rest.service import SERVICE, RestService
from waystation.gateway.http.rest.substore import DIRECTORY, SubscriptionStore


def setup(app: web.Application, ctx: HttpContext) -> None:
    """Mount the REST resources on ``app`` and tie their background work to its life."""
    cfg = ctx.cfg.rest
    svc = RestService(ctx.engine, cfg, ctx.data_dir)
    store = SubscriptionStore(ctx.data_dir / DIRECTORY if ctx.data_dir else None)
    owners = Owners(cfg.max_consumers_per_user, cfg.max_consumers_per_address)
    registry = Registry(cfg.session_timeout_task_interval.total_seconds(), store, owners)
    manager = pushes.PushManager(svc)
    app[SERVICE] = svc
    app[consumers.REGISTRY] = registry
    app[pushes.PUSH] = manager
    destinations.setup_routes(app)
    producer.setup_routes(app)
    consumers.setup_routes(app)
    pulling.setup_routes(app)
    pushes.setup_routes(app)

    async def start(_: web.Application) -> None:
        await store.load(lambda name, topic: consumers.durable_queue_of(svc, topic, name))
        registry.start()
        await manager.start()

    async def shutdown(_: web.Application) -> None:
        registry.wake_all()  # held long polls answer 503 now, queued ones too

    async def cleanup(_: web.Application) -> None:
        await manager.stop()
        await registry.stop()
        svc.close()

    app.on_startup.append(start)
    app.on_shutdown.append(shutdown)
    app.on_cleanup.append(cleanup)


__all__ = ["setup"]
