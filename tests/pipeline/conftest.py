"""One Spark session (local[2]) for every pipeline test: starting the JVM costs 10-40 s here,
the jobs themselves a few seconds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession  # the test extra installs it: never skipped

from waystation.pipeline.session import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    s = spark_session("local[2]", shuffle_partitions=4, driver_memory="1g")
    yield s
    s.stop()
