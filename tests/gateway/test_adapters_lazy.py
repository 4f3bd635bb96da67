"""The AMQP adapter is listed without importing proton, and agrees with the real one."""

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
