"""The ``[logging]`` table against a real ``waystation run``: JSON lines on stderr, levels per
logger, and a reload that switches the format without a restart."""

from __future__ import annotations

import io
import json
import logging
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from nodekit import NodeProcess

from waystation.config.schema import Config
from waystation.gateway import logs

JSON_LOGGING = """
[logging]
format = "json"
level = "warning"
levels = { "waystation.audit" = "info", "waystation.node" = "INFO" }
"""


def json_lines(node: NodeProcess) -> list[dict[str, object]]:
    return [json.loads(line) for line in node.log().splitlines() if line.startswith("{")]


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def unauthenticated_admin_call(node: NodeProcess) -> None:
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(node.http_url + "/admin/api/v1/queues", timeout=10)
    assert e.value.code == 401


USERS = '[[users]]\nname = "admin"\npassword = "pw"\nroles = ["admin"]\n'


def test_json_lines_and_per_logger_levels_at_start(tmp_path):
    node = NodeProcess(tmp_path, USERS + JSON_LOGGING, http=True).start()
    try:
        unauthenticated_admin_call(node)  # an audit line at INFO
        audit = wait_for(
            lambda: [r for r in json_lines(node) if r["logger"] == "waystation.audit"],
            "the audit line",
        )
    finally:
        node.stop()
    text = node.log().strip().splitlines()
    records = json_lines(node)
    assert len(records) == len(text), [t for t in text if not t.startswith("{")]
    for r in records:
        assert {"time", "level", "logger", "message"} <= r.keys()
    assert audit[0]["level"] == "INFO" and audit[0]["outcome"] == "no-credentials"
    assert audit[0]["remote"].startswith("127.0.0.1:") and audit[0]["path"].endswith("/queues")
    loggers = {r["logger"] for r in records}
    assert "waystation.node" in loggers  # its own INFO level: "node ... ready"
    # everything else at WARNING: the engine's INFO start-up line is not there
    assert not [r for r in records if r["level"] == "INFO" and r["logger"] == "waystation.engine"]
    assert all(
        r["level"] != "INFO" or r["logger"] in ("waystation.audit", "waystation.node")
        for r in records
    )


def test_a_reload_switches_to_json_and_back_to_text(tmp_path):
    node = NodeProcess(tmp_path, http=True).start()
    try:
        assert node.log() and not json_lines(node)
        node.config_path.write_text(node.config_path.read_text() + JSON_LOGGING)
        # by the API first (SIGHUP is handled only once the node has fully started)
        req = urllib.request.Request(node.http_url + "/admin/api/v1/reload", method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert "logging: json, WARNING" in json.load(r)["changes"][0]
        wait_for(
            lambda: [r for r in json_lines(node) if "logging: json" in str(r["message"])],
            "the reload's JSON line",
        )
        node.config_path.write_text(node.config_path.read_text().replace(JSON_LOGGING, ""))
        assert node.proc is not None
        node.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload: logging: text" in node.log(), "the reload back to text")
    finally:
        node.stop()
    tail = node.log().split("reload: logging: text", 1)[1]
    assert not [line for line in tail.splitlines() if line.startswith("{")]


def test_the_json_formatter_keeps_extra_fields_and_tracebacks():
    out = io.StringIO()
    cfg = Config.model_validate({"logging": {"format": "json", "levels": {"x.y": "debug"}}})
    logs.configure(cfg, stream=out)
    try:
        logging.getLogger("x.y").debug("hello %s", "you", extra={"queue": "q1", "n": 3})
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("x.y").exception("failed")
        logging.getLogger("x.z").debug("not shown: x.z is at the root's INFO")
    finally:
        logs.configure(Config.model_validate({}), stream=io.StringIO())
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["message"] for r in lines] == ["hello you", "failed"]
    assert lines[0]["queue"] == "q1" and lines[0]["n"] == 3 and lines[0]["level"] == "DEBUG"
    assert "ValueError: boom" in lines[1]["exception"]
    assert logging.getLogger("x.y").level == logging.NOTSET  # the reload dropped it
