"""Built-in values: what a node uses when the config file (or the whole file) is silent."""

from __future__ import annotations

from typing import Any

DEFAULT_NODE_NAME = "waystation"
DEFAULT_DATA_DIR = "./data"

# Embedded default listeners: loopback only.  A config file may listen anywhere.
STOMP_URL = "tcp://127.0.0.1:61613"
HTTP_URL = "http://127.0.0.1:8161"
AMQP_URL = "tcp://127.0.0.1:5672"
MQTT_URL = "tcp://127.0.0.1:1883"

DEAD_LETTER_QUEUE = "DLQ"
EXPIRY_QUEUE = "ExpiryQueue"

# Store-and-forward queue for remote node N is "sf.N" (the default queue of a bridge to N).
SF_QUEUE_PREFIX = "sf."

# Address settings applied to every address ("#") unless the file declares its own "#" entry,
# which then replaces this one entirely.
CATCH_ALL_PATTERN = "#"
CATCH_ALL_SETTINGS: dict[str, Any] = {
    "dead_letter_address": DEAD_LETTER_QUEUE,
    "expiry_address": EXPIRY_QUEUE,
    "max_delivery_attempts": 10,
}


def sf_queue(remote_node: str) -> str:
    """The store-and-forward queue holding messages bound for ``remote_node``."""
    return f"{SF_QUEUE_PREFIX}{remote_node}"
