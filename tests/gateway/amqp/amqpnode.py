"""A real ``waystation run`` process with an AMQP listener, and proton client helpers."""

from __future__ import annotations

from pathlib import Path

from nodekit import SECURITY_USERS, NodeProcess

HERE = Path(__file__).resolve().parent


class AmqpNode(NodeProcess):
    """A node with STOMP and AMQP listeners (``amqp_port``); ``secure`` adds the users of
    nodekit.SECURITY_USERS with security on."""

    def __init__(self, workdir: Path, extra_config: str = "", secure: bool = False, **kw):
        if secure:
            extra_config = SECURITY_USERS + extra_config
        super().__init__(workdir, extra_config, amqp=kw.pop("amqp", True), **kw)

    @property
    def url(self) -> str:
        return f"amqp://127.0.0.1:{self.amqp_port}"
