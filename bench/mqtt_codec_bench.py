#!/usr/bin/env python3
"""Micro-benchmark of the MQTT codec's hot path: QoS 1 PUBLISH with a 100-byte payload.

Prints publishes decoded and encoded per second for MQTT 3.1.1 and 5, decoding from 64 KiB
reads (as a busy socket delivers them) and one packet per feed, so a change to the
codec can be judged in seconds. No sockets, one process.

  python bench/mqtt_codec_bench.py [--n 200000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from waystation.wire.mqtt import MQTT_5, MQTT_311, Connect, MqttParser, Publish, encode


def _best(fn: object, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t)
    return best


def run(version: int, props: dict[str, Any], n: int, repeat: int) -> dict[str, float]:
    payload = bytes(range(100))
    pubs = [
        Publish("sensors/site-1/temp", payload, 1, packet_id=1 + i % 65535, properties=props)
        for i in range(n)
    ]
    connect = encode(Connect("bench", protocol_level=version), version)
    wire = [encode(p, version) for p in pubs]
    stream = b"".join(wire)

    def enc() -> None:
        for p in pubs:
            encode(p, version)

    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]

    def dec_stream() -> None:
        parser = MqttParser()
        parser.feed(connect)
        got = 0
        for c in chunks:  # as a socket delivers them: 64 KiB reads, packets cut anywhere
            got += len(parser.feed(c))
        assert got == n

    def dec_each() -> None:
        parser = MqttParser()
        parser.feed(connect)
        feed = parser.feed
        for w in wire:
            feed(w)

    return {
        "encode/s": n / _best(enc, repeat),
        "decode/s (64 KiB reads)": n / _best(dec_stream, repeat),
        "decode/s (one packet per feed)": n / _best(dec_each, repeat),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"QoS 1 PUBLISH, 100-byte payload, n={args.n}, best of {args.repeat}")
    for name, version, props in (
        ("3.1.1", MQTT_311, {}),
        ("5.0", MQTT_5, {}),
        ("5.0 + message_expiry_interval", MQTT_5, {"message_expiry_interval": 60}),
    ):
        for k, v in run(version, props, args.n, args.repeat).items():
            print(f"MQTT {name:30} {k:32} {v:>12,.0f}")


if __name__ == "__main__":
    main()
