"""Client mistakes and engine refusals as precise HTTP answers, never a 500.

Handlers raise ``web.HTTPException`` subclasses built by :func:`fail`, or let an engine
exception through: :func:`guarded` turns each kind into its status code with the engine's own
text, so a bad request never takes the server or another client down.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from waystation.core.consumer import ConsumerError
from waystation.core.filter import FilterError
from waystation.core.limits import LimitExceeded
from waystation.core.postoffice import AddressFull, QueueExists, RoutingError
from waystation.core.security import AuthenticationError, NotAuthorized
from waystation.core.session import SessionError

log = logging.getLogger("waystation.rest")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REALM = 'Basic realm="waystation", charset="UTF-8"'


def fail(
    cls: type[web.HTTPException], reason: str, headers: Mapping[str, str] | None = None
) -> web.HTTPException:
    """An HTTP error whose plain-text body says what was wrong."""
    text = reason.rstrip("\n") + "\n"
    hdrs = dict(headers) if headers else None
    if cls is web.HTTPRequestEntityTooLarge:  # its constructor wants the sizes
        return web.HTTPRequestEntityTooLarge(0, 0, text=text, headers=hdrs)
    return cls(text=text, headers=hdrs)


def unauthorized(reason: str) -> web.HTTPException:
    return fail(web.HTTPUnauthorized, reason, {"WWW-Authenticate": REALM})


def guarded(handler: Handler) -> Handler:
    """Map engine exceptions to HTTP status codes; log (and 500) only real bugs."""

    @functools.wraps(handler)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except AuthenticationError as e:
            raise unauthorized(str(e)) from None
        except NotAuthorized as e:
            raise fail(web.HTTPForbidden, f"not authorized: {e}") from None
        except RoutingError as e:
            raise fail(web.HTTPNotFound, f"unknown destination: {e}") from None
        except AddressFull as e:
            raise fail(
                web.HTTPServiceUnavailable, f"address full: {e}", {"Retry-After": "1"}
            ) from None
        except QueueExists as e:
            raise fail(web.HTTPConflict, str(e)) from None
        except LimitExceeded as e:  # the text names the limit
            raise fail(web.HTTPServiceUnavailable, str(e), {"Retry-After": "5"}) from None
        except SessionError as e:
            raise fail(web.HTTPConflict, str(e)) from None
        except ConsumerError as e:
            raise fail(web.HTTPConflict, f"consumer refused: {e}") from None
        except FilterError as e:
            raise fail(web.HTTPBadRequest, f"invalid selector: {e}") from None
        except ValueError as e:
            raise fail(web.HTTPBadRequest, f"invalid request: {e}") from None
        except Exception:
            # the text of a bug's exception stays in the log: it can carry paths, object
            # addresses or another client's data
            ref = secrets.token_hex(4)  # random: a memory address would tell the layout
            log.exception("REST %s %s: internal error (ref %s)", request.method, request.path, ref)
            raise fail(
                web.HTTPInternalServerError, f"internal error (ref {ref}; see the server log)"
            ) from None

    return wrapper


__all__ = ["Handler", "fail", "guarded", "unauthorized"]
