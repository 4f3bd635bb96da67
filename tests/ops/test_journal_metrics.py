"""Journal fsync durations and group-commit sizes as Prometheus histograms, scraped from a
real node and parsed with ``prometheus_client.parser``."""

from __future__ import annotations

import urllib.request

from nodekit import NodeProcess
from prometheus_client.parser import text_string_to_metric_families
from stompkit import connect, unique

from waystation.core.store.timing import Buckets

SYNC = "waystation_journal_fsync_seconds"
GROUP = "waystation_journal_group_commit_writes"


def scrape(node: NodeProcess) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    with urllib.request.urlopen(node.http_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        fam.name: [(s.name, s.labels, s.value) for s in fam.samples]
        for fam in text_string_to_metric_families(text)
    }


def histogram(samples: list[tuple[str, dict[str, str], float]]) -> tuple[list[float], float, float]:
    """Cumulative bucket counts (in ``le`` order), count and sum; checks they agree."""
    buckets = [(float(lb["le"]), v) for n, lb, v in samples if n.endswith("_bucket")]
    count = next(v for n, _, v in samples if n.endswith("_count"))
    total = next(v for n, _, v in samples if n.endswith("_sum"))
    counts = [v for _, v in sorted(buckets)]
    assert counts == sorted(counts), counts  # cumulative
    assert sorted(buckets)[-1][0] == float("inf") and counts[-1] == count
    return counts, count, total


def test_fsyncs_and_group_commits_are_histograms(tmp_path):
    node = NodeProcess(tmp_path, http=True).start()
    try:
        before = scrape(node)
        _, groups0, writes0 = histogram(before[GROUP])
        conn, got = connect(node.stomp_port)
        q, n = unique("durable"), 20
        for i in range(n):  # one at a time: each receipt waits for its own fsync
            conn.send(f"/queue/{q}", f"m{i}", receipt=f"r{i}", headers={"persistent": "true"})
            got.wait_receipt(f"r{i}")
        conn.disconnect()
        after = scrape(node)
    finally:
        node.stop()
    _, syncs, seconds = histogram(after[SYNC])
    fsyncs = next(v for name, _, v in after["waystation_journal_fsyncs"] if name.endswith("_total"))
    assert syncs == fsyncs >= n  # every fdatasync is timed
    assert 0 < seconds < 60
    _, groups, writes = histogram(after[GROUP])
    assert groups - groups0 >= n and writes - writes0 >= n  # each send waited for one group


def test_no_journal_histograms_without_persistence(tmp_path):
    node = NodeProcess(tmp_path, "", http=True)
    node.config_path.write_text(
        node.config_path.read_text().replace(
            'data_dir = "data"', 'data_dir = "data"\npersistence = false'
        )
    )
    node.start()
    try:
        families = scrape(node)
    finally:
        node.stop()
    assert SYNC not in families and GROUP not in families


def test_buckets_count_each_value_once_at_its_bound():
    b = Buckets((1.0, 2.0))
    for v in (0.5, 1.0, 1.5, 2.0, 3.0):
        b.observe(v)
    snap = b.snapshot()
    assert snap.counts == (2, 2, 1) and snap.count == 5 and snap.total == 8.0
