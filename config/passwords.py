"""Password hashes for ``[[users]]``: PBKDF2-HMAC-SHA256 in a self-describing string.

Format: ``pbkdf2_sha256$<iterations>$<salt, base64>$<hash, base64>`` (standard base64 with
padding).  Make one with ``python -m waystation.config.passwords`` (prompts, prints the hash).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from typing import NamedTuple

SCHEME = "pbkdf2_sha256"
DEFAULT_ITERATIONS = 600_000  # OWASP 2023 recommendation for PBKDF2-HMAC-SHA256
MIN_ITERATIONS = 1_000
SALT_BYTES = 16


class PasswordHash(NamedTuple):
    iterations: int
    salt: bytes
    digest: bytes


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def parse_hash(stored: str) -> PasswordHash:
    """Split a stored hash into its parts; ValueError says what is malformed."""
    parts = stored.split("$")
    if len(parts) != 4 or parts[0] != SCHEME:
        raise ValueError(
            f"expected a hash of the form '{SCHEME}$<iterations>$<salt_b64>$<hash_b64>' "
            "(make one with `python -m waystation.config.passwords`)"
        )
    _, iterations_text, salt_text, digest_text = parts
    if not iterations_text.isdigit() or int(iterations_text) < MIN_ITERATIONS:
        raise ValueError(
            f"hash iterations must be an integer >= {MIN_ITERATIONS}, got {iterations_text!r}"
        )
    try:
        salt, digest = _b64decode(salt_text), _b64decode(digest_text)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ValueError("hash salt and digest must be base64") from None
    if not salt or len(digest) != hashlib.sha256().digest_size:
        raise ValueError("hash salt is empty or digest is not 32 bytes")
    return PasswordHash(int(iterations_text), salt, digest)


def _derive(password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)


def hash_password(
    password: str, *, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> str:
    """A new ``pbkdf2_sha256$...`` string for ``password`` (random 16-byte salt by default)."""
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"iterations must be >= {MIN_ITERATIONS}")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = _derive(password, salt, iterations)
    return "$".join(
        (
            SCHEME,
            str(iterations),
            base64.b64encode(salt).decode(),
            base64.b64encode(digest).decode(),
        )
    )


def verify_password(password: str, stored: str) -> bool:
    """True when ``password`` matches ``stored``; constant-time compare; False if malformed."""
    try:
        parsed = parse_hash(stored)
    except ValueError:
        return False
    return hmac.compare_digest(_derive(password, parsed.salt, parsed.iterations), parsed.digest)


def main() -> None:
    """Prompt for a password twice and print its hash."""
    import getpass
    import sys

    first = getpass.getpass("Password: ")
    if first != getpass.getpass("Again: "):
        sys.exit("passwords differ")
    print(hash_password(first))


__all__ = ["DEFAULT_ITERATIONS", "PasswordHash", "hash_password", "parse_hash", "verify_password"]


if __name__ == "__main__":
    main()
