"""The ``waystation`` command: version, check-config, run and graceful stop."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from nodekit import ROOT, NodeProcess
from stompkit import connect, unique

EXAMPLES = sorted((ROOT / "config" / "examples").glob("*.toml"))


def waystation(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "waystation.gateway.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        timeout=60,
    )


def test_version():
    r = waystation("--version")
    assert r.returncode == 0 and r.stdout.startswith("waystation ")


def test_examples_pass_check_config():
    assert EXAMPLES
    for f in EXAMPLES:
        r = waystation("check-config", str(f))
        assert r.returncode == 0, r.stderr
        assert "OK" in r.stdout


BROKEN = {
    "unknown key": ('[node]\nname = "a"\ncolour = "red"\n', "node: unknown key 'colour'"),
    "wrong type": ('[node]\npersistence = "yes"\n', "node.persistence"),
    "bad filter": ('[[queues]]\nname = "q"\nfilter = "a = = 1"\n', "filter"),
    "divert loop": (
        '[[diverts]]\nname = "d1"\naddress = "a"\ntarget = "b"\n[[diverts]]\nname = "d2"\naddress = "b"\ntarget = "a"\n',
        "divert loop",
    ),
    "bad toml": ("[node\n", "invalid TOML"),
}


def test_broken_configs_are_refused_naming_the_key(tmp_path):
    for name, (text, fragment) in BROKEN.items():
        f = tmp_path / f"{name.replace(' ', '-')}.toml"
        f.write_text(text)
        r = waystation("check-config", str(f))
        assert r.returncode == 2, f"{name}: {r.stdout} {r.stderr}"
        assert f.name in r.stderr and fragment in r.stderr, f"{name}: {r.stderr}"
        run = waystation("run", str(f))
        assert run.returncode == 2 and fragment in run.stderr


def test_sigterm_stops_gracefully_and_durable_messages_survive(tmp_path):
    node = NodeProcess(tmp_path).start()
    assert node.ready_seconds < 5
    q = unique()
    conn, lst = connect(node.stomp_port)
    for i in range(10):
        conn.send(f"/queue/{q}", f"m{i}", headers={"persistent": "true", "receipt": f"r{i}"})
    lst.wait_receipt("r9")
    conn.disconnect()
    assert node.proc is not None
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(15) == 0
    assert "stopped" in node.log()
    node.start()
    try:
        c2, l2 = connect(node.stomp_port)
        c2.subscribe(f"/queue/{q}", id="s")
        assert [m.body for m in l2.wait_messages(10)] == [f"m{i}" for i in range(10)]
        c2.disconnect()
    finally:
        node.stop()


def test_port_in_use_is_a_clear_error(tmp_path):
    a = NodeProcess(tmp_path / "a").start()
    try:
        b = NodeProcess(tmp_path / "b")
        b.config_path.write_text(
            b.config_path.read_text().replace(str(b.stomp_port), str(a.stomp_port))
        )
        r = subprocess.run(
            [sys.executable, "-m", "waystation.gateway.cli", "run", str(b.config_path)],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=b.workdir,
        )
        assert r.returncode == 1
        assert "cannot start" in r.stderr and "address already in use" in r.stderr.lower()
    finally:
        a.stop()


def test_a_data_folder_in_use_is_one_clear_line(tmp_path):
    a = NodeProcess(tmp_path / "a").start()
    try:
        b = NodeProcess(tmp_path / "b")  # other ports, the same data folder as a
        b.config_path.write_text(
            b.config_path.read_text().replace(
                'data_dir = "data"', f'data_dir = "{a.workdir / "data"}"'
            )
        )
        r = waystation("run", str(b.config_path), cwd=b.workdir)
        assert r.returncode == 1
        line = [x for x in r.stderr.splitlines() if "cannot start" in x]
        assert line == [
            f"waystation: cannot start: journal directory {a.workdir / 'data' / 'journal'} is in use by another journal"
        ]
        assert "Traceback" not in r.stderr
    finally:
        a.stop()


def test_check_config_and_run_print_the_config_warnings(tmp_path):
    cfg = tmp_path / "w.toml"
    cfg.write_text('[security]\nenabled = true\n[[users]]\nname = "u"\npassword = "pw"\n')
    r = waystation("check-config", str(cfg))
    assert r.returncode == 0
    assert "warning: " in r.stdout and "plain-text password" in r.stdout
