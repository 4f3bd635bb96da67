"""The Docker image's files, rebuilt from docker/Dockerfile's COPY lines, make a node that runs.

No Docker engine is needed: the build context is copied exactly as the COPY lines say, then
installed into a fresh venv the way the Dockerfile's RUN does (``pip install .``) and the
image's CMD is started with the image's config (ports moved to free ones on 127.0.0.1, data
in a temp folder).  A package the Dockerfile forgets is then missing at start-up, as it was
when the image left out ``wire/`` and ``client/``.

The venv does not use ``--system-site-packages``: that would also run this checkout's
editable-install hook, which quietly serves any ``waystation.*`` package the image lacks
from the repository.  Instead a ``.pth`` line puts the interpreter's site-packages
directory on the path (dependencies come from this environment) without running its hooks.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import site
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import pytest
import stomp
import yaml
from dockerkit import materialize, parse, without_copy
from nodekit import free_port, wait_port
from stompkit import Collect

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def top_level_packages() -> tuple[str, ...]:
    """setup.py's TOP_LEVEL: the folders installed as ``waystation.<name>``."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "TOP_LEVEL" for t in node.targets
        ):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no TOP_LEVEL")


def test_dockerfile_copies_every_package() -> None:
    df = parse(DOCKERFILE.read_text())
    copied = {s.rstrip("/") for c in df.copies for s in c.sources}
    needed = {"setup.py", "pyproject.toml", "README.md", "waystation", *top_level_packages()}
    assert needed <= copied, f"docker/Dockerfile does not COPY {sorted(needed - copied)}"
    assert any(re.search(r"\bpip install\b.*(\s|^)\.(\s|$)", r) for r in df.runs), (
        "the Dockerfile is expected to install the copied tree with `pip install .`"
    )
    assert df.cmd[:2] == ["waystation", "run"], df.cmd


@pytest.mark.parametrize(
    "compose", sorted(p.relative_to(ROOT) for p in (ROOT / "docker").rglob("compose*.y*ml"))
)
def test_compose_builds_from_the_dockerfile(compose: Path) -> None:
    """Every compose service builds the one image: repository root as context, this
    Dockerfile (so a service cannot drift to a context that lacks packages), and every
    config it mounts is one that ``waystation check-config`` accepts (checked below)."""
    doc = yaml.safe_load((ROOT / compose).read_text())
    services = doc["services"]
    assert services, f"{compose}: no services"
    for name, svc in services.items():
        build = svc.get("build")
        assert isinstance(build, dict), f"{compose}: service {name} does not build the image"
        ctx = ((ROOT / compose).parent / build["context"]).resolve()
        assert ctx == ROOT, f"{compose}: {name} builds from {ctx}, not the repository root"
        dockerfile = (ctx / build.get("dockerfile", "Dockerfile")).resolve()
        assert dockerfile == DOCKERFILE, f"{compose}: {name} builds {dockerfile}"


def _compose_configs() -> list[Path]:
    """Host files the compose services mount as their node config."""
    out = []
    for compose in (ROOT / "docker").rglob("compose*.y*ml"):
        for svc in yaml.safe_load(compose.read_text())["services"].values():
            for vol in svc.get("volumes", []):
                src = vol.split(":", 1)[0]
                if src.endswith(".toml"):
                    out.append((compose.parent / src).resolve())
    return sorted(set(out))


def _node_config(image_root: Path, cmd: list[str], data_dir: Path) -> tuple[str, int]:
    """The image's config with listeners on free loopback ports and data in ``data_dir``."""
    path = image_root / cmd[2].lstrip("/")
    text = path.read_text()
    ports: dict[str, int] = {}

    def local(m: re.Match[str]) -> str:
        port = free_port()
        ports[m.group(1)] = port
        return f'"{m.group(1)}://127.0.0.1:{port}"'

    text = re.sub(r'"(\w+)://0\.0\.0\.0:\d+"', local, text)
    text, n = re.subn(r"(?m)^data_dir\s*=.*$", f'data_dir = "{data_dir.as_posix()}"', text)
    assert n == 1, "the image config sets data_dir once"
    cfg = tomllib.loads(text)
    stomp_url = cfg["acceptors"]["stomp"]
    stomp_url = stomp_url if isinstance(stomp_url, str) else stomp_url["url"]
    return text, int(stomp_url.rsplit(":", 1)[1])


def _boot(dockerfile_text: str, tmp: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    """Rebuild the image's files under ``tmp``, install, and start its CMD."""
    df = parse(dockerfile_text)
    image = tmp / "image"
    materialize(df, ROOT, image, DOCKERFILE)
    assert not list(image.rglob("__pycache__")), "the ignore file keeps caches out"
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "_host_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # pure Python: compiling takes over a minute here, and tests/packaging/test_wheel.py
    # proves the compiled build (the image's RUN compiles, with the gcc it installs)
    env["WAYSTATION_COMPILE"] = "0"
    workdir = image / df.workdir.lstrip("/")
    install = subprocess.run(
        [py, "-m", "pip", "install", "--no-deps", "--no-cache-dir", "-q", str(workdir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
        timeout=180,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    config_text, port = _node_config(image, df.cmd, tmp / "data")
    config = tmp / "node.toml"
    config.write_text(config_text)
    log_path = tmp / "node.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(venv / "bin" / df.cmd[0]), *df.cmd[1:2], str(config)],
            cwd=tmp,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return proc, port, log_path


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    return proc.returncode


def test_node_from_the_docker_context_serves_stomp(tmp_path: Path) -> None:
    t0 = time.monotonic()
    proc, port, log = _boot(DOCKERFILE.read_text(), tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        try:
            wait_port(port, timeout=30, proc=proc)
        except (RuntimeError, TimeoutError) as e:
            raise AssertionError(f"{e}\n{log.read_text(errors='replace')}") from None
        # The venv (so the node) imports its own copy of every package, never this checkout.
        where = subprocess.run(
            [tmp_path / "venv" / "bin" / "python", "-c",
             "import waystation.wire, waystation.client, waystation.core; "
             "print(waystation.wire.__file__, waystation.client.__file__)"],
            capture_output=True, text=True, cwd=tmp_path, check=True, env=env,
        ).stdout  # fmt: skip
        assert str(ROOT) not in where and str(tmp_path / "venv") in where, where
        # The configs the compose files mount are valid for the image's code.
        configs = _compose_configs()
        assert configs, "docker/ compose files mount node configs"
        for cfg in configs:
            check = subprocess.run(
                [tmp_path / "venv" / "bin" / "waystation", "check-config", cfg],
                capture_output=True, text=True, cwd=tmp_path, env=env,
            )  # fmt: skip
            assert check.returncode == 0, f"{cfg}: {check.stdout}{check.stderr}"

        conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0))
        listener = Collect()
        conn.set_listener("c", listener)
        conn.connect("guest", "guest", wait=True)
        try:
            queue = f"/queue/docker-{uuid.uuid4().hex[:8]}"
            conn.subscribe(queue, id="1", ack="auto")
            conn.send(queue, "from the image", receipt="r1")
            listener.wait_receipt("r1")
            (msg,) = listener.wait_messages(1)
            assert msg.body == "from the image"
            assert msg.headers["destination"] == queue
        finally:
            conn.disconnect()
    finally:
        code = _stop(proc)
    assert code == 0, log.read_text(errors="replace")
    assert time.monotonic() - t0 < 60


def test_a_package_left_out_of_the_dockerfile_is_caught(tmp_path: Path) -> None:
    """The check above can fail: drop ``COPY wire wire`` and the node cannot start."""
    proc, port, log = _boot(without_copy(DOCKERFILE.read_text(), "wire"), tmp_path)
    try:
        with pytest.raises(RuntimeError, match="exited"):
            wait_port(port, timeout=30, proc=proc)
    finally:
        _stop(proc)
    assert "No module named 'waystation.wire'" in log.read_text(errors="replace")
