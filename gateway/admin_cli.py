"""``waystation admin ...`` and ``waystation hash-password``: the operator's commands.

``admin`` is a client of the node's admin API (``/admin/api/v1``, HTTP Basic), so it works
against any node it can reach and is refused and audited like any other caller.  Each
sub-command prints a table for a person (rich) or, with ``--json``, the API's answer as is.
Where to connect and as whom come from options or the environment (``WAYSTATION_URL``,
``WAYSTATION_USER``, ``WAYSTATION_PASSWORD``), so a password need not be on the command line.

``hash-password`` prints a ``password_hash`` for ``[[users]]``: it prompts twice on a
terminal and reads one line from a pipe (``printf '%s' "$PW" | waystation hash-password``).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import getpass
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

API = "/admin/api/v1"
DEFAULT_URL = "http://127.0.0.1:8161"


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def request(args: argparse.Namespace, method: str, path: str, body: object = None) -> Any:
    """One API call; the decoded JSON answer, or ApiError with the node's message."""
    url = args.url.rstrip("/") + API + path
    if body is None and method != "GET":
        body = {}  # a change always goes as JSON: the node refuses any other body (CSRF)
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)  # Host: the URL's
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if args.user:
        token = base64.b64encode(f"{args.user}:{args.password or ''}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=args.timeout) as r:
            return json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read()).get("error", e.reason)
        except (ValueError, AttributeError):
            message = str(e.reason)
        raise ApiError(e.code, message) from None
    except urllib.error.URLError as e:
        raise ApiError(0, f"cannot reach {args.url}: {e.reason}") from None


def all_pages(args: argparse.Namespace, path: str, key: str) -> dict[str, Any]:
    """Every page of a list the node answers a page at a time (``limit``, ``after``)."""
    items: list[Any] = []
    after: str | None = None
    while True:
        query = {"limit": "1000", **({"after": after} if after is not None else {})}
        data = request(args, "GET", f"{path}?{urllib.parse.urlencode(query)}")
        items += data.get(key, [])
        after = data.get("next")
        if not after:
            return {**data, key: items, "next": None}


# -- output -----------------------------------------------------------------------------
def _table(title: str, columns: list[str], rows: list[list[object]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c, justify="right" if c in NUMERIC else "left", overflow="fold")
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    # piped (a file, grep): wide enough that rows are not folded into several lines
    Console(width=None if sys.stdout.isatty() else 200).print(t)


NUMERIC = {"depth", "in flight", "consumers", "enqueued", "acked", "in", "out", "id", "size"}
NUMERIC |= {"waiting", "forwarded", "failed"}


def _since(t: object) -> str:
    if not isinstance(t, int | float):
        return ""
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def show_queues(data: dict[str, Any]) -> None:
    rows = [
        [
            q["name"],
            q["address"],
            q["routing"],
            q["depth"],
            q["in_flight"],
            q["consumers"],
            q["enqueued"],
            q["acked"],
            "paused" if q["paused"] else "",
        ]
        for q in sorted(data["queues"], key=lambda q: q["name"])
    ]
    cols = ["queue", "address", "routing", "depth", "in flight", "consumers", "enqueued", "acked"]
    _table("Queues", [*cols, "state"], rows)


def show_messages(data: dict[str, Any]) -> None:
    rows = []
    for m in data["messages"]:
        body = m["body"] if m["body"] is not None else "(binary)"
        reason = m.get("dead_letter_reason")
        rows.append(
            [
                m["id"],
                m["size"],
                m.get("original_address") or "",
                reason or "",
                json.dumps(m["properties"]) if m["properties"] else "",
                body if len(body) <= 60 else body[:57] + "...",
            ]
        )
    title = f"{data['queue']}: {len(rows)} of {data['depth']} waiting (from {data['offset']})"
    _table(title, ["id", "size", "original address", "reason", "properties", "body"], rows)


def show_connections(data: dict[str, Any]) -> None:
    rows = [
        [
            c["id"],
            c["protocol"],
            c["user"],
            c["remote"],
            c.get("client_id") or "",
            _since(c["since"]),
            c["messages_in"],
            c["messages_out"],
            c["consumers"],
        ]
        for c in data["connections"]
    ]
    cols = ["id", "protocol", "user", "remote", "client id", "since", "in", "out", "consumers"]
    _table("Connections", cols, rows)


def show_bridges(data: dict[str, Any]) -> None:
    rows = [
        [
            b.get("name"),
            b.get("remote_node") or b.get("foreign") or "",
            "paused" if b.get("paused") else b.get("state"),
            b.get("url") or "",
            b.get("waiting"),
            b.get("in_flight"),
            b.get("forwarded"),
            b.get("failed"),
            b.get("last_error") or "",
        ]
        for b in data["bridges"]
    ]
    cols = ["bridge", "remote", "state", "url", "waiting", "in flight", "forwarded", "failed"]
    _table("Bridges", [*cols, "last error"], rows)


def show_bridge(data: dict[str, Any]) -> None:
    show_bridges({"bridges": [data]})


def show_diverts(data: dict[str, Any]) -> None:
    rows = [
        [d["name"], d["address"], d["target"], d["filter"] or "", "yes" if d["exclusive"] else ""]
        for d in data["diverts"]
    ]
    _table("Diverts", ["divert", "address", "target", "filter", "exclusive"], rows)


def show_changes(data: dict[str, Any]) -> None:
    print("\n".join(data["changes"]) or "nothing changed")


def show_result(data: dict[str, Any]) -> None:
    print(", ".join(f"{k}: {v}" for k, v in data.items()))


# -- the commands ---------------------------------------------------------------------------
def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _call(args: argparse.Namespace) -> tuple[Any, Any]:
    """The API call a command makes: its answer, and how to show it."""
    what = args.what
    if what == "queues":
        return all_pages(args, "/queues", "queues"), show_queues
    if what == "browse":
        query = urllib.parse.urlencode(
            {k: v for k, v in (("limit", args.limit), ("offset", args.offset),
                               ("selector", args.selector)) if v is not None}
        )  # fmt: skip
        return request(args, "GET", f"/queues/{_q(args.queue)}/messages?{query}"), show_messages
    if what == "purge":
        return request(args, "DELETE", f"/queues/{_q(args.queue)}/messages"), show_result
    if what == "retry":
        body = {"ids": args.id} if args.id else {}
        return request(args, "POST", f"/queues/{_q(args.queue)}/retry", body), show_result
    if what == "move":
        body = {"target": args.target, **({"ids": args.id} if args.id else {})}
        return request(args, "POST", f"/queues/{_q(args.queue)}/move", body), show_result
    if what == "connections" and args.close:
        return request(args, "DELETE", f"/connections/{_q(args.close)}"), show_result
    if what == "connections":
        return request(args, "GET", "/connections"), show_connections
    if what == "bridges" and (args.pause or args.resume):
        verb, name = ("pause", args.pause) if args.pause else ("resume", args.resume)
        return request(args, "POST", f"/bridges/{_q(name)}/{verb}"), show_bridge
    if what == "bridges":
        return request(args, "GET", "/bridges"), show_bridges
    if what == "diverts":
        return request(args, "GET", "/diverts"), show_diverts
    if what == "create":
        return request(args, "POST", PLURAL[args.kind], _create_body(args)), show_result
    if what == "delete":
        return request(args, "DELETE", f"{PLURAL[args.kind]}/{_q(args.name)}"), show_result
    return request(args, "POST", "/reload"), show_changes


PLURAL = {"queue": "/queues", "address": "/addresses", "divert": "/diverts"}


def _create_body(args: argparse.Namespace) -> dict[str, object]:
    """The JSON of ``create queue|address|divert``: only what was given (the node's
    defaults apply to the rest, as in the config file)."""
    body: dict[str, object] = {"name": args.name}
    for key in ("address", "target", "routing", "filter"):
        if getattr(args, key, None) is not None:
            body[key] = getattr(args, key)
    if getattr(args, "non_durable", False):
        body["durable"] = False
    if getattr(args, "exclusive", False):
        body["exclusive"] = True
    return body


def cmd_admin(args: argparse.Namespace) -> int:
    try:
        data, show = _call(args)
    except ApiError as e:
        print(f"waystation admin: {e.status or 'error'}: {e}", file=sys.stderr)
        return 3 if e.status == 0 else 1
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        show(data)
    return 0


def read_password(stdin: Any = None) -> str:
    """The password to hash: one line from a pipe, or asked twice on a terminal."""
    stdin = stdin or sys.stdin
    if not stdin.isatty():
        line = stdin.readline()
        return line[:-1] if line.endswith("\n") else line
    first = getpass.getpass("Password: ")
    if first != getpass.getpass("Again: "):
        raise SystemExit("waystation hash-password: the passwords differ")
    return first


def cmd_hash_password(args: argparse.Namespace) -> int:
    from waystation.config.passwords import hash_password

    password = read_password()
    if not password:
        print("waystation hash-password: empty password", file=sys.stderr)
        return 2
    if args.iterations is None:
        print(hash_password(password))
    else:
        print(hash_password(password, iterations=args.iterations))
    return 0


def _add_create_delete(what: Any) -> None:
    """``create queue|address|divert`` and ``delete ...``: run-time changes, checked as the
    config file is, kept until the node restarts (durable queues survive that too)."""
    create = what.add_parser("create", help="create a queue, address or divert at run time")
    kinds = create.add_subparsers(dest="kind", required=True)
    q = kinds.add_parser("queue", help="a queue (anycast by default, durable by default)")
    q.add_argument("name")
    q.add_argument("--address", help="the address it is bound to (default: its name)")
    q.add_argument("--routing", choices=("anycast", "multicast"))
    q.add_argument("--filter", help="only messages matching this selector")
    q.add_argument("--non-durable", action="store_true", help="gone at the next restart")
    a = kinds.add_parser("address", help="an address with no queue yet (a topic)")
    a.add_argument("name")
    a.add_argument("--routing", choices=("anycast", "multicast"), help="default multicast")
    d = kinds.add_parser("divert", help="copy (or move) what arrives at an address elsewhere")
    d.add_argument("name")
    d.add_argument("address", help="source address or pattern")
    d.add_argument("target", help="local address or node::address")
    d.add_argument("--filter", help="only messages matching this selector")
    d.add_argument("--exclusive", action="store_true", help="move instead of copy")
    delete = what.add_parser("delete", help="delete a queue, address or divert")
    delete.add_argument("kind", choices=("queue", "address", "divert"))
    delete.add_argument("name")


def add_parser(subparsers: Any) -> None:
    """Register ``admin`` and ``hash-password`` on the ``waystation`` command."""
    env = os.environ
    a = subparsers.add_parser("admin", help="look into and act on a running node (admin API)")
    a.add_argument("--url", default=env.get("WAYSTATION_URL", DEFAULT_URL), help="node's HTTP URL")
    a.add_argument("--user", "-u", default=env.get("WAYSTATION_USER"), help="login (manage role)")
    a.add_argument(
        "--password", "-p", default=env.get("WAYSTATION_PASSWORD"), help="or WAYSTATION_PASSWORD"
    )
    a.add_argument("--json", action="store_true", help="print the API's JSON answer")
    a.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    what = a.add_subparsers(dest="what", required=True)
    what.add_parser("queues", help="queues with depth, consumers and totals")
    b = what.add_parser("browse", help="a queue's waiting messages, without taking them")
    b.add_argument("queue")
    b.add_argument("--selector", help="only messages matching this selector")
    b.add_argument("--limit", type=int, help="at most this many (default 100)")
    b.add_argument("--offset", type=int, help="skip this many first")
    p = what.add_parser("purge", help="remove every waiting message of a queue")
    p.add_argument("queue")
    r = what.add_parser("retry", help="send dead letters back to their original address")
    r.add_argument("queue", nargs="?", default="DLQ", help="the dead-letter queue (DLQ)")
    r.add_argument("--id", type=int, action="append", help="only this message (repeatable)")
    m = what.add_parser("move", help="send a queue's waiting messages to another address")
    m.add_argument("queue")
    m.add_argument("target")
    m.add_argument("--id", type=int, action="append", help="only this message (repeatable)")
    c = what.add_parser("connections", help="open connections (or close one)")
    c.add_argument("--close", metavar="ID", help="close the connection with this id")
    br = what.add_parser("bridges", help="bridges and their link state (or pause/resume one)")
    one = br.add_mutually_exclusive_group()
    one.add_argument("--pause", metavar="NAME", help="stop forwarding on this bridge")
    one.add_argument("--resume", metavar="NAME", help="forward again on this bridge")
    what.add_parser("diverts", help="the diverts in force (from the file and made at run time)")
    what.add_parser("reload", help="read the node's config file again and apply what changed")
    _add_create_delete(what)
    a.set_defaults(func=cmd_admin)
    h = subparsers.add_parser(
        "hash-password", help="print a password_hash for [[users]] (reads a pipe or prompts)"
    )
    h.add_argument("--iterations", type=int, help=argparse.SUPPRESS)
    h.set_defaults(func=cmd_hash_password)


__all__ = ["add_parser", "cmd_admin", "cmd_hash_password", "read_password"]
