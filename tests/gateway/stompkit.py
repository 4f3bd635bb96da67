"""stomp.py helpers: a listener that collects frames and waits for them."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import stomp
from stomp.utils import Frame


class Collect(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.messages: list[Frame] = []
        self.errors: list[Frame] = []
        self.receipts: list[str] = []
        self.heartbeats = 0
        self.disconnected = False
        self.cond = threading.Condition()

    def on_message(self, frame: Frame) -> None:
        with self.cond:
            self.messages.append(frame)
            self.cond.notify_all()

    def on_error(self, frame: Frame) -> None:
        with self.cond:
            self.errors.append(frame)
            self.cond.notify_all()

    def on_receipt(self, frame: Frame) -> None:
        with self.cond:
            self.receipts.append(frame.headers["receipt-id"])
            self.cond.notify_all()

    def on_heartbeat(self) -> None:
        with self.cond:
            self.heartbeats += 1
            self.cond.notify_all()

    def on_disconnected(self) -> None:
        with self.cond:
            self.disconnected = True
            self.cond.notify_all()

    def wait(self, pred: Callable[[], bool], timeout: float = 10.0) -> bool:
        end = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return True

    def wait_messages(self, n: int, timeout: float = 10.0) -> list[Frame]:
        assert self.wait(lambda: len(self.messages) >= n, timeout), (
            f"got {len(self.messages)} of {n} messages"
        )
        return self.messages

    def wait_receipt(self, rid: str, timeout: float = 10.0) -> None:
        assert self.wait(lambda: rid in self.receipts, timeout), (
            f"no receipt {rid!r}; errors={[e.headers for e in self.errors]}"
        )

    def wait_error(self, timeout: float = 10.0) -> Frame:
        assert self.wait(lambda: bool(self.errors), timeout), "no ERROR frame"
        return self.errors[0]


def connect(
    port: int,
    version: str = "1.2",
    login: str = "guest",
    passcode: str = "guest",
    heartbeats: tuple[int, int] = (0, 0),
    wait: bool = True,
    auto_decode: bool = True,
    **headers: str,
) -> tuple[stomp.Connection, Collect]:
    cls = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}[version]
    kw: dict[str, object] = {"auto_decode": auto_decode}
    if version != "1.0":
        kw["heartbeats"] = heartbeats
    conn = cls([("127.0.0.1", port)], **kw)  # type: ignore[arg-type]
    listener = Collect()
    conn.set_listener("c", listener)
    conn.connect(login, passcode, wait=wait, headers=headers)
    return conn, listener


def unique(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
