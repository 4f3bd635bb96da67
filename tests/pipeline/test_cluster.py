"""The reconcile job, unchanged, on a Spark standalone cluster (a master and two workers
started here from the pyspark installation, on 127.0.0.1) gives the same summary.json as
on ``local[2]``, and its tasks ran in the workers' executors.  Marked ``slow``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark
import pytest
from nodekit import free_port, wait_port
from pyspark.sql import SparkSession

from waystation.pipeline.events import read_events
from waystation.pipeline.generate import generate
from waystation.pipeline.reconcile import reconcile

# about 110 s here (two more JVMs and a cluster): opt in with -m slow
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
ROOT = Path(__file__).resolve().parents[2]
FAULTS = {"lost": 2, "duplicated": 3, "dead_lettered": 2, "expired": 1, "in_flight": 3}


def spark_env() -> dict[str, str]:
    return dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_HOME=str(SPARK_CLASS.parent.parent),
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )


def daemon(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as f:
        return subprocess.Popen(
            [str(SPARK_CLASS), *args],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=spark_env(),
            start_new_session=True,  # a group: a worker's executors go with it
        )


def alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except OSError:
        return 0


@pytest.fixture
def cluster(tmp_path: Path):
    port, ui = free_port(), free_port()
    procs = [
        daemon(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                "--port", str(port), "--webui-port", str(ui)], tmp_path / "master.log")
    ]  # fmt: skip
    try:
        wait_port(port, timeout=60, proc=procs[0])
        for i in (1, 2):
            work = tmp_path / f"worker-{i}"
            work.mkdir()
            procs.append(
                daemon(["org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                        "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                        "--webui-port", str(free_port()), "--work-dir", str(work)],
                       tmp_path / f"worker-{i}.log")
            )  # fmt: skip
        deadline = time.monotonic() + 90
        while alive_workers(ui) < 2:
            assert time.monotonic() < deadline, (tmp_path / "worker-1.log").read_text()[-2000:]
            time.sleep(0.5)
        yield f"spark://127.0.0.1:{port}"
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_cluster_gives_the_local_summary(spark: SparkSession, cluster: str, tmp_path: Path):
    logs = tmp_path / "logs"
    generate(logs, 1500, sites=3, faults=FAULTS, seed=11)
    local = reconcile(spark, read_events(spark, [logs]), tmp_path / "local")

    run = subprocess.run(
        [sys.executable, "-m", "waystation.pipeline.cli", "reconcile", str(logs),
         "--out", str(tmp_path / "cluster"), "--master", cluster, "--quiet",
         "--driver-memory", "512m"],
        env=spark_env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    on_cluster = json.loads((tmp_path / "cluster" / "summary.json").read_text())
    assert on_cluster == json.loads((tmp_path / "local" / "summary.json").read_text())
    assert on_cluster["status"]["lost"] == FAULTS["lost"] and local.summary["messages"] == 1500
    # the work was done by executors the workers started, not by a local driver
    apps = [p for i in (1, 2) for p in (tmp_path / f"worker-{i}").glob("app-*/*")]
    assert len({p.parent.parent for p in apps}) == 2, apps
