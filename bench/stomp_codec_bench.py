#!/usr/bin/env python3
"""Micro-benchmark of the STOMP codec's hot path: SEND and MESSAGE frames, 100-byte bodies.

Prints frames parsed and encoded per CPU second (best of ``--repeat``), parsing from 64 KiB reads
(as a busy socket delivers them) and one frame per feed, so a codec change, or compiling the
codec with mypyc, can be judged in seconds. No sockets, one process. It also prints which file
the codec was loaded from, so a compiled module (``.so``) and the pure one are told apart.

  python bench/stomp_codec_bench.py [--n 200000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import waystation.wire.stomp as stomp
from waystation.wire.stomp import StompParser, encode_frame, encode_message


def _best(fn: Callable[[], None], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()  # CPU time: a busy machine skews it less than wall time
        fn()
        best = min(best, time.process_time() - t)
    return best


def _parse(frames: list[bytes], n: int, repeat: int, version: str) -> dict[str, float]:
    stream = b"".join(frames)
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]

    def stream_reads() -> None:
        parser = StompParser()
        parser.version = version
        got = 0
        for c in chunks:  # 64 KiB reads, frames cut anywhere
            got += len(parser.feed(c))
        assert got == n, got

    def one_each() -> None:
        parser = StompParser()
        parser.version = version
        feed = parser.feed
        for f in frames:
            feed(f)

    return {"(64 KiB reads)": n / _best(stream_reads, repeat),
            "(one frame per feed)": n / _best(one_each, repeat)}  # fmt: skip


def run(n: int, repeat: int) -> dict[str, float]:
    body = bytes(range(100))
    version = "1.2"
    sends = [
        encode_frame("SEND", {"destination": "/queue/bench", "receipt": f"r-{i}"}, body)
        for i in range(n)
    ]
    ids = [f"ID:node-1-{i}" for i in range(n)]
    extra = {"persistent": "true", "priority": "4"}

    def enc_send() -> None:
        for i in range(n):
            encode_frame("SEND", {"destination": "/queue/bench", "receipt": ids[i]}, body)

    def enc_message() -> None:
        for mid in ids:
            encode_message("/queue/bench", mid, "sub-0", body, extra, None, version)

    messages = [encode_message("/queue/bench", m, "sub-0", body, extra, None) for m in ids]
    out = {"encode SEND/s": n / _best(enc_send, repeat),
           "encode MESSAGE/s": n / _best(enc_message, repeat)}  # fmt: skip
    for k, v in _parse(sends, n, repeat, version).items():
        out[f"parse SEND/s {k}"] = v
    for k, v in _parse(messages, n, repeat, version).items():
        out[f"parse MESSAGE/s {k}"] = v
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"codec: {stomp.__file__}")
    print(f"STOMP 1.2, 100-byte bodies, n={args.n}, best of {args.repeat}")
    for k, v in run(args.n, args.repeat).items():
        print(f"{k:40} {v:>12,.0f}")


if __name__ == "__main__":
    main()
