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


def run_container(handler: object, timeout: float = 10.0) -> None:
    """Run a proton ``Container`` with ``handler`` until it sets ``finished``; fail if it
    has not by ``timeout`` seconds (a client that waits forever is the failure)."""
    import time

    from proton.reactor import Container

    c = Container(handler)
    c.container_id = getattr(handler, "container_id", "test-container")
    deadline = time.monotonic() + timeout
    late = []

    class Watch:
        def on_timer_task(self, event: object) -> None:
            if getattr(handler, "finished", False):
                c.stop()
            elif time.monotonic() > deadline:
                late.append(True)
                c.stop()
            else:
                c.schedule(0.02, self)

    c.schedule(0.02, Watch())
    c.run()
    assert not late, f"{type(handler).__name__} did not finish within {timeout} s"
