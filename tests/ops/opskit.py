"""A secured node for the operations tests, and small HTTP helpers."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from nodekit import NodeProcess

# "admin" may manage everything; "ops" may manage only ``ops.#``; "app" may message but not
# manage; "app" and "admin" may browse.
USERS = """
[[users]]
name = "admin"
password = "adminpw"
roles = ["admin"]

[[users]]
name = "ops"
password = "opspw"
roles = ["ops"]

[[users]]
name = "app"
password = "secret"
roles = ["rw"]

[[permissions]]
match = "#"
send = ["rw", "admin"]
consume = ["rw", "admin"]
browse = ["rw", "admin"]
create_durable_queue = ["rw", "admin"]
create_non_durable_queue = ["rw", "admin"]
delete_durable_queue = ["rw", "admin"]
delete_non_durable_queue = ["rw", "admin"]
manage = ["admin"]

[[permissions]]
match = "ops.#"
send = ["rw", "admin", "ops"]
consume = ["rw", "admin", "ops"]
browse = ["rw", "admin", "ops"]
create_durable_queue = ["rw", "admin", "ops"]
manage = ["admin", "ops"]

[security.login]
free_failures = 100
free_failures_per_user = 100
"""

ADMIN = aiohttp.BasicAuth("admin", "adminpw")
OPS = aiohttp.BasicAuth("ops", "opspw")
APP = aiohttp.BasicAuth("app", "secret")


def secured_node(workdir: Path, extra: str = "") -> NodeProcess:
    return NodeProcess(workdir, USERS + extra, http=True)
