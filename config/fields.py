"""Building blocks of the config schema: the base table and value types.

Every type here is an ``Annotated`` alias with a plain validator, so a bad value becomes one
error at its own key path with a message written for a person (``expected ..., got ...``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import SplitResult, unquote, urlsplit

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, ValidationInfo
from pydantic_core import core_schema

from waystation.config.passwords import parse_hash
from waystation.config.units import describe_value, parse_duration, parse_size
from waystation.core.address import NODE_SEPARATOR, InvalidAddress, validate_name
from waystation.core.filter import FilterError, compile_filter
from waystation.core.settings import FullPolicy


class Section(BaseModel):
    """Base for every table: unknown keys refused, no silent type coercion, defaults checked."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)


@dataclass(frozen=True, slots=True)
class PlainCheck:
    """A field validated by one function (what ``PlainValidator`` does), made cheaply.

    Why not ``PlainValidator``: for each field using one it also builds a serializer for
    the field's type and inspects the function's signature; without that, defining the
    schema (at every node start) takes about 0.02 s and 0.3 MB less.  The config is never
    serialized, and whether the function takes ``info`` is said here.
    ``schema`` is the input type that the JSON schema shows.
    """

    fn: Callable[..., Any]
    schema: Any = str
    info: bool = False  # the function takes (value, info: ValidationInfo)

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        shown = handler.generate_schema(self.schema)
        if self.info:
            return core_schema.with_info_plain_validator_function(
                self.fn, json_schema_input_schema=shown
            )
        return core_schema.no_info_plain_validator_function(self.fn, json_schema_input_schema=shown)


def _plain(fn: Callable[..., Any], schema: Any = str, info: bool = False) -> PlainCheck:
    return PlainCheck(fn, schema, info)


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {describe_value(value)}")
    return value


# --- durations and sizes -------------------------------------------------------------------


def _duration_or_off(value: object) -> timedelta | Literal["off"]:
    if value is False or (type(value) is int and value == -1):
        return "off"
    if isinstance(value, str) and value.strip().lower() in ("off", "none", "-1"):
        return "off"
    return parse_duration(value)


Duration = Annotated[timedelta, _plain(parse_duration, str | float)]
DurationOrOff = Annotated[timedelta | Literal["off"], _plain(_duration_or_off, str | float)]
Size = Annotated[int, _plain(parse_size, str | int)]
SizeOrUnlimited = Annotated[int, _plain(lambda v: parse_size(v, allow_unlimited=True), str | int)]


# --- names -----------------------------------------------------------------------------------

_NODE_NAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
_NAME = re.compile(r"[^\s,:$]+")
_IDENT = r"[A-Za-z_]\w*"
_DOTTED = re.compile(rf"{_IDENT}(\.{_IDENT})*(:{_IDENT}(\.{_IDENT})*)?")


def node_name(value: object) -> str:
    text = _string(value)
    if NODE_SEPARATOR in text:
        raise ValueError(f"a node name must not contain '{NODE_SEPARATOR}', got {text!r}")
    if not _NODE_NAME.fullmatch(text):
        raise ValueError(
            f"a node name is words of letters, digits, '_' or '-' separated by '.', got {text!r}"
        )
    return text


def _address(value: object, *, wildcards: bool) -> str:
    text = _string(value)
    if NODE_SEPARATOR in text:
        raise ValueError(
            f"{text!r} names a remote node ('{NODE_SEPARATOR}'); a local address is needed here"
        )
    try:
        return validate_name(text, allow_wildcards=wildcards)
    except InvalidAddress as e:
        raise ValueError(str(e)) from None


def address_name(value: object) -> str:
    """A concrete local address (no wildcards, no ``node::``); ValueError otherwise."""
    return _address(value, wildcards=False)


def target_address(value: object) -> str:
    """A concrete local address, or ``node::address`` for a store-and-forward target."""
    text = _string(value)
    node, sep, rest = text.partition(NODE_SEPARATOR)
    if not sep:
        return _address(text, wildcards=False)
    node_name(node)
    _address(rest, wildcards=False)
    return text


def _filter(value: object) -> str | None:
    if value is None:
        return None
    text = _string(value).strip()
    if not text:
        return None
    try:
        compile_filter(text)
    except FilterError as e:  # "filter syntax error at position 7 near '=': ..."
        raise ValueError(str(e)) from None
    return text


def _dotted_path(value: object) -> str:
    text = _string(value)
    if not _DOTTED.fullmatch(text) or ("." not in text and ":" not in text):
        raise ValueError(
            f"expected a Python path like 'package.module:function' or 'package.module.function', got {text!r}"
        )
    return text


def _name(value: object) -> str:
    text = _string(value)
    if not _NAME.fullmatch(text):
        raise ValueError(f"a name must be non-empty without spaces, ',', ':' or '$', got {text!r}")
    return text


NodeName = Annotated[str, _plain(node_name)]
AddressName = Annotated[str, _plain(address_name)]
AddressPattern = Annotated[str, _plain(lambda v: _address(v, wildcards=True))]
TargetAddress = Annotated[str, _plain(target_address)]
FilterText = Annotated[str | None, _plain(_filter)]  # blank means no filter
DottedPath = Annotated[str, _plain(_dotted_path)]


def _password_hash(value: object) -> str:
    text = _string(value)
    parse_hash(text)
    return text


Name = Annotated[str, _plain(_name)]  # divert, bridge, user and role names
PasswordHashText = Annotated[str, _plain(_password_hash)]  # pbkdf2_sha256$iterations$salt$hash


# --- choices (case-insensitive) ---------------------------------------------------------------


def _choice_parser(values: tuple[str, ...]) -> Callable[[object], str]:
    canonical = {v.lower(): v for v in values}

    def parse(value: object) -> str:
        if isinstance(value, str) and value.lower() in canonical:
            return canonical[value.lower()]
        raise ValueError(f"expected one of {', '.join(values)}, got {describe_value(value)}")

    return parse


def choice(*values: str) -> PlainCheck:
    """Validator for one of ``values``, matched case-insensitively, returned in canonical case."""
    return _plain(_choice_parser(values))


def enum_choice(enum: type[Enum]) -> PlainCheck:
    """Like ``choice`` over an Enum's values; yields the Enum member."""
    pick = _choice_parser(tuple(str(m.value) for m in enum))
    return _plain(lambda v: v if isinstance(v, enum) else enum(pick(v)))


FullPolicyChoice = Annotated[FullPolicy, enum_choice(FullPolicy)]


# --- paths --------------------------------------------------------------------------------------


def _config_path(value: object, info: ValidationInfo) -> Path:
    path = value if isinstance(value, Path) else Path(_string(value)).expanduser()
    if path.is_absolute():
        return path
    base = (info.context or {}).get("base_dir")
    return Path(base or Path.cwd()) / path


def _relative_path(value: object) -> Path:
    return value if isinstance(value, Path) else Path(_string(value)).expanduser()


ConfigPath = Annotated[
    Path, _plain(_config_path, info=True)
]  # relative: against the config file's folder
RelativePath = Annotated[Path, _plain(_relative_path)]  # kept as written; the owner resolves it


# --- URLs ---------------------------------------------------------------------------------------

_HOSTNAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?"
)
DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed URL: where to listen or connect."""

    scheme: str
    host: str
    port: int
    path: str = ""
    username: str | None = None
    password: str | None = None

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def _split(text: str) -> SplitResult:
    if "://" not in text:
        raise ValueError(f"expected a URL like 'tcp://127.0.0.1:61613', got {text!r}")
    return urlsplit(text)


def parse_url(
    value: object,
    schemes: tuple[str, ...],
    *,
    path_allowed: bool = False,
    credentials_allowed: bool = False,
) -> Endpoint:
    """Check scheme, host, port (0-65535; 0 = any free port) and the parts allowed; ValueError."""
    text = _string(value).strip()
    parts = _split(text)
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        raise ValueError(
            f"URL scheme must be one of {', '.join(schemes)}, got {scheme or 'none'!r} in {text!r}"
        )
    host = parts.hostname or ""
    if not host:
        raise ValueError(f"URL {text!r} has no host")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _HOSTNAME.fullmatch(host):
            raise ValueError(f"URL {text!r} has an invalid host {host!r}") from None
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"URL {text!r} has an invalid port (expected 0-65535)") from None
    if port is None:
        if scheme not in DEFAULT_PORTS:
            raise ValueError(f"URL {text!r} has no port")
        port = DEFAULT_PORTS[scheme]
    if parts.path not in ("", "/") and not path_allowed:
        raise ValueError(f"URL {text!r} must not have a path")
    if parts.query or parts.fragment:
        raise ValueError(f"URL {text!r} must not have a query or fragment")
    if (parts.username is not None or parts.password is not None) and not credentials_allowed:
        raise ValueError(f"URL {text!r} must not carry credentials")
    return Endpoint(
        scheme=scheme,
        host=host,
        port=port,
        path=parts.path if path_allowed else "",
        username=unquote(parts.username) if parts.username is not None else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )


def _url_check(
    schemes: tuple[str, ...], *, path_allowed: bool = False, credentials_allowed: bool = False
) -> PlainCheck:
    def check(value: object) -> str:
        parse_url(
            value, schemes, path_allowed=path_allowed, credentials_allowed=credentials_allowed
        )
        return _string(value).strip()

    return _plain(check)


STREAM_SCHEMES = ("tcp", "tls")
HTTP_SCHEMES = ("http", "https")
BRIDGE_SCHEMES = ("tcp", "tls", "ws", "wss", "http", "https", "amqp", "amqps")

StreamListenUrl = Annotated[str, _url_check(STREAM_SCHEMES)]
HttpListenUrl = Annotated[str, _url_check(HTTP_SCHEMES, path_allowed=True)]
BridgeUrl = Annotated[str, _url_check(BRIDGE_SCHEMES, path_allowed=True)]
ProxyUrl = Annotated[str, _url_check(("http",), credentials_allowed=True)]
