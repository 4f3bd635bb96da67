"""The ``waystation`` command: run a node, check a config file, run a relay, print the
version.

``run`` is how a node starts, and its start-up time is the node's: the version (a scan of
the installed distributions) is looked up only for ``--version``, and the other commands'
modules (the admin client's HTTP stack, the pipeline) are not loaded for ``run``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys

from waystation.gateway.logs import TEXT_FORMAT
from waystation.gateway.logs import configure as configure_logging

log = logging.getLogger("waystation")


def version() -> str:
    from importlib import metadata

    try:
        return metadata.version("waystation")
    except metadata.PackageNotFoundError:
        return "0.1.0+source"


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout, with the terminal's width found as ``shutil`` finds it.

    Why: argparse imports ``shutil`` for that width alone whenever an argument is added, and
    ``shutil`` brings ``bz2`` and ``lzma``: 1 MB of an idle node's 40 MB budget (issue 16).
    """

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_columns() - 2)


def _columns() -> int:
    """``shutil.get_terminal_size().columns``: $COLUMNS, else stdout's terminal, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Version(argparse.Action):
    """``--version``, looked up when asked for."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(f"waystation {version()}")
        parser.exit()


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=TEXT_FORMAT,
        stream=sys.stderr,
    )


def _load(path: str | None):  # noqa: ANN202 - returns config.schema.Config
    from waystation.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as e:
        print(f"waystation: invalid configuration\n{e}", file=sys.stderr)
        raise SystemExit(2) from None


async def _serve(cfg, config_path: str | None) -> int:  # noqa: ANN001
    from waystation.core.store.api import StoreError
    from waystation.gateway.gc_policy import tune_for_serving
    from waystation.gateway.node import Node, NodeError

    try:
        node = Node(cfg, config_path)
    except NodeError as e:
        print(f"waystation: cannot start: {e}", file=sys.stderr)
        return 2
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await node.start()
    except (OSError, StoreError) as e:  # a port in use, a data folder locked or not writable
        print(f"waystation: cannot start: {e}", file=sys.stderr)
        with contextlib.suppress(Exception):
            await node.stop()
        return 1
    tune_for_serving()
    with contextlib.suppress(NotImplementedError):  # SIGHUP: read the config file again
        loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(_reload(node)))
    await stop.wait()
    log.info("stopping")
    await node.stop()
    log.info("stopped")
    return 0


async def _reload(node) -> None:  # noqa: ANN001 - a gateway.node.Node
    from waystation.gateway.reload import ReloadRefused

    try:
        await node.reload()
    except ReloadRefused as e:
        log.error("reload refused: %s", e)
    except Exception:
        log.exception("reload failed part way")


def cmd_run(args: argparse.Namespace) -> int:
    cfg = _load(args.config)
    configure_logging(cfg, args.log_level, args.log_format)
    if args.config is None:
        log.info("no config file given: embedded defaults (data in %s)", cfg.node.data_dir)
    for advice in cfg.warnings():
        log.warning("config: %s", advice)
    # the event loop must not wait 5 ms for the GIL while a journal compaction runs
    sys.setswitchinterval(0.001)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.run(_serve(cfg, args.config))
    return uvloop.run(_serve(cfg, args.config))


def cmd_check_config(args: argparse.Namespace) -> int:
    cfg = _load(args.config)
    print(
        f"{args.config}: OK (node {cfg.node.name!r}, {len(cfg.queues)} queues, "
        f"{len(cfg.diverts)} diverts, {len(cfg.bridges)} bridges)"
    )
    for advice in cfg.warnings():
        print(f"warning: {advice}")
    return 0


def cmd_relay(args: argparse.Namespace) -> int:
    """Run one relay (client/relay.py) until SIGTERM or SIGINT."""
    from waystation.client.relay import RelayError, RelaySpec, serve

    _setup_logging(args.log_level)
    try:
        spec = RelaySpec.parse(
            args.listen, args.to, args.protocol, args.via, args.proxy, args.ca, args.retry_for
        )
    except RelayError as e:
        print(f"waystation relay: {e}", file=sys.stderr)
        return 2

    async def go() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        try:
            await serve([spec], stop)
        except OSError as e:  # the listen port in use
            print(f"waystation relay: cannot listen: {e}", file=sys.stderr)
            return 1
        return 0

    return asyncio.run(go())


def _add_relay(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser(
        "relay",
        help="carry local STOMP/MQTT/AMQP clients to a remote node through a proxy",
        description="Listen locally and carry each client's byte stream to a remote node "
        "through the HTTP tunnel, a WebSocket or CONNECT (docs/relay.md).",
        formatter_class=_Formatter,
    )
    r.add_argument("--listen", required=True, help="local host:port, e.g. 127.0.0.1:61613")
    r.add_argument(
        "--to",
        required=True,
        help="remote node: http(s)://host:port (tunnel, ws) or tcp|tls://host:port (connect)",
    )
    r.add_argument("--protocol", default="stomp", choices=("stomp", "mqtt", "amqp"))
    r.add_argument(
        "--via", choices=("tunnel", "ws", "connect"), help="default: from the --to scheme"
    )
    r.add_argument("--proxy", help="http://[user:password@]host:port")
    r.add_argument("--ca", help="PEM bundle to verify an https/wss/tls remote")
    r.add_argument(
        "--retry-for",
        type=float,
        default=30.0,
        help="tunnel: seconds the proxy or node may be unreachable before a client is cut",
    )
    r.add_argument("--log-level", default="info")
    r.set_defaults(func=cmd_relay)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="waystation",
        description="Waystation protocol gateway and bridge node.",
        formatter_class=_Formatter,
    )
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser(
        "run", help="run a node (embedded defaults without CONFIG)", formatter_class=_Formatter
    )
    r.add_argument("config", nargs="?", help="TOML config file")
    r.add_argument("--log-level", help="override node.log_level")
    r.add_argument("--log-format", choices=("text", "json"), help="override [logging] format")
    r.set_defaults(func=cmd_run)
    c = sub.add_parser(
        "check-config", help="validate a config file without starting", formatter_class=_Formatter
    )
    c.add_argument("config", help="TOML config file")
    c.set_defaults(func=cmd_check_config)
    _add_relay(sub)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["run"]:  # `waystation run ...` parses without them
        from waystation.gateway.admin_cli import add_parser as add_admin_commands

        add_admin_commands(sub)  # admin ..., hash-password
        from waystation.pipeline.cli import add_parser as add_pipeline_commands

        add_pipeline_commands(sub)  # pipeline reconcile ...
    args = p.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
