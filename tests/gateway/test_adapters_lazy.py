"""The AMQP and MQTT adapters are listed without importing their packages, and agree with
the real ones."""

from __future__ import annotations

import subprocess
import sys

from waystation.gateway.adapters import ADAPTERS


def test_lazy_amqp_adapter_matches_the_package() -> None:
    from waystation.gateway.amqp import ADAPTER as REAL

    lazy = ADAPTERS["amqp"]
    assert (lazy.name, lazy.subprotocols, lazy.text_frames, lazy.on_start) == (
        REAL.name,
        REAL.subprotocols,
        REAL.text_frames,
        REAL.on_start,
    )
    assert lazy.refusal("full") == REAL.refusal("full")


def test_listing_the_adapters_does_not_import_proton() -> None:
    code = (
        "import sys, waystation.gateway.adapters as a\n"
        "assert 'proton' not in sys.modules, 'proton imported'\n"
        "assert 'waystation.gateway.amqp' not in sys.modules\n"
        "a.ADAPTERS['amqp'].refusal('x')\n"
        "assert 'proton' in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_lazy_mqtt_adapter_matches_the_package() -> None:
    from waystation.gateway.adapters import MQTT_STATE
    from waystation.gateway.mqtt import ADAPTER as REAL
    from waystation.gateway.mqtt.shared import SCOPE

    lazy = ADAPTERS["mqtt"]
    assert (lazy.name, lazy.subprotocols, lazy.text_frames) == (
        REAL.name,
        REAL.subprotocols,
        REAL.text_frames,
    )
    assert lazy.refusal("full") == REAL.refusal("full")
    assert lazy.on_start is not None and REAL.on_start is not None
    assert MQTT_STATE == SCOPE  # the scopes the lazy on_start looks for before importing


def test_listing_the_adapters_does_not_import_mqtt_until_needed() -> None:
    code = (
        "import sys, waystation.gateway.adapters as a\n"
        "from waystation.core.engine import Engine\n"
        "assert 'waystation.gateway.mqtt' not in sys.modules, 'mqtt imported'\n"
        "e = Engine()\n"
        "assert a.ADAPTERS['mqtt'].on_start(e) == 0  # no MQTT session stored: nothing to do\n"
        "assert 'waystation.gateway.mqtt' not in sys.modules, 'imported by on_start'\n"
        "a.ADAPTERS['mqtt'].refusal('x')\n"
        "assert 'waystation.gateway.mqtt' in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
