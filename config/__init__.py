"""Waystation configuration: TOML files validated into ``Config`` (see ``config.schema``).

    from waystation.config import load_config, ConfigError
    cfg = load_config("site.toml")      # or None for the embedded default
    cfg.node.name, cfg.acceptors.enabled(), cfg.engine_address_settings()

``ConfigError.problems`` lists every problem, one line each, naming file, key path and cause.
"""

from __future__ import annotations

from waystation.config import pydantic_plugins

pydantic_plugins.install()  # before the first model below is built: see its docstring

from waystation.config.errors import ConfigError  # noqa: E402
from waystation.config.loader import default_config, load_config, parse_config  # noqa: E402
from waystation.config.passwords import hash_password, verify_password  # noqa: E402
from waystation.config.schema import Config  # noqa: E402

__all__ = [
    "Config",
    "ConfigError",
    "default_config",
    "hash_password",
    "load_config",
    "parse_config",
    "verify_password",
]
