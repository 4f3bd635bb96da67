"""A Spark session with defaults that suit a 2-core machine and a quiet terminal.

``local[*]`` unless told otherwise; the same code runs against ``spark://host:port`` (the
job only uses DataFrames, so nothing here is local-only).  Shuffle partitions default to
four per core instead of Spark's 200, which on small data is mostly task overhead.
"""

from __future__ import annotations

import os
import sys
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
    # 28 CPU-s instead of 39 on the 2-core machine, a scan 5 instead of 6)
    java_opts = (
        f"-Dlog4j.configurationFile={LOG4J.as_uri()} -Dlog4j2.level=ERROR -XX:+UseParallelGC"
    )
    b = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions or 4 * cores(master)))
        .config("spark.default.parallelism", str(2 * cores(master)))
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.extraJavaOptions", java_opts)
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
