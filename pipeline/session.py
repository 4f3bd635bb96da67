"""A Spark session with defaults that suit a 2-core machine and a quiet terminal.

``local[*]`` unless told otherwise; the same code runs against ``spark://host:port`` (the
job only uses DataFrames, so nothing here is local-only).  Shuffle partitions default to
four per core instead of Spark's 200, which on small data is mostly task overhead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession

LOG4J = Path(__file__).with_name("log4j2.properties")


def cores(master: str) -> int:
    """Cores a ``local[N]``/``local[*]`` master uses (``os.cpu_count()`` otherwise)."""
    n = os.cpu_count() or 2
    if master.startswith("local[") and master.endswith("]"):
        inner = master[6:-1].split(",")[0]
        if inner != "*":
            n = int(inner)
    return n


def class_archive_options() -> str:
    """JVM options for a class-data-sharing archive of the driver's classes (AppCDS): the
    JVM maps Spark's parsed and verified classes instead of loading them from the jars
    (start and first query about 4 CPU-s less on the 2-core machine).

    Kept under the user's cache folder, one per Java and pyspark installation.  A run
    without one writes it when its JVM exits (to a name of its own, which the next run
    adopts once that JVM is gone); a missing, partial or stale archive only means the
    classes load the usual way (``-Xshare:auto``).  ``WAYSTATION_SPARK_CDS=0`` turns it
    off."""
    if os.environ.get("WAYSTATION_SPARK_CDS", "1") == "0":
        return ""
    try:
        import pyspark

        home = os.environ.get("JAVA_HOME")
        java = Path(home, "bin", "java") if home else Path(shutil.which("java") or "java")
        jars = Path(pyspark.__file__).parent / "jars"
        ident = f"{java.resolve()}|{java.resolve().stat().st_mtime}|{jars}|{jars.stat().st_mtime}"
        key = hashlib.sha256(f"{ident}|{pyspark.__version__}".encode()).hexdigest()[:16]
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        folder = base / "waystation" / "spark-cds"
        folder.mkdir(parents=True, exist_ok=True)
        archive = folder / f"{key}.jsa"
        for done in sorted(folder.glob(f"{key}.*.jsa")):
            pid = int(done.name.split(".")[1])
            # its run has ended and the JVM, which writes it on exit, is long done
            if not _alive(pid) and time.time() - done.stat().st_mtime > 60:
                if archive.exists():
                    done.unlink()  # a second run wrote one before the first was adopted
                else:
                    os.replace(done, archive)
    except (OSError, ValueError):
        return ""
    quiet = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"
    if archive.exists():
        return f"-XX:SharedArchiveFile={archive} {quiet}"
    return f"-XX:ArchiveClassesAtExit={folder / f'{key}.{os.getpid()}.jsa'} {quiet}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def spark_session(
    master: str = "local[*]",
    *,
    app: str = "waystation-pipeline",
    shuffle_partitions: int | None = None,
    driver_memory: str = "2g",
    extra: dict[str, str] | None = None,
) -> SparkSession:
    """Get (or create) the session.  Settings that need the JVM (driver memory, logging) only
    apply when this call starts it."""
    # the Python workers must be this interpreter (the Data Source API needs its pyarrow)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "resolves to loopback"
    # the parallel collector: less CPU than G1 for a batch job (start and first query
    # 28 CPU-s instead of 39 on the 2-core machine, a scan 5 instead of 6).  Huge methods
    # compiled too: HotSpot leaves a method over 8,000 bytes of bytecode to the
    # interpreter, and Spark's generated code for a wide aggregate is that big (the
    # reconcile job's per-trace step took 39 CPU-s interpreted, 20 compiled)
    java_opts = (
        f"-Dlog4j.configurationFile={LOG4J.as_uri()} -Dlog4j2.level=ERROR -XX:+UseParallelGC"
        " -XX:-DontCompileHugeMethods"
    )
    driver_opts = f"{java_opts} {class_archive_options()}".strip()
    b = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions or 4 * cores(master)))
        .config("spark.default.parallelism", str(2 * cores(master)))
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.extraJavaOptions", driver_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "true")
        # an object hash aggregate (collect_list, percentile_approx) sorts its whole input
        # once it holds 128 groups; the reconcile job's per-trace step holds one group per
        # trace of a partition, a few hundred bytes each
        .config("spark.sql.objectHashAggregate.sortBased.fallbackThreshold", "200000")
    )
    for k, v in (extra or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
