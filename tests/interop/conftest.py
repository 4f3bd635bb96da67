import sys
from pathlib import Path

for p in (Path(__file__).resolve().parents[1] / "gateway" / "mqtt",):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
