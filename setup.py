"""Package layout only (the metadata is in pyproject.toml).

The repository keeps the product's top-level folders (core/, gateway/, ...); installed, each
one is a subpackage of the single ``waystation`` namespace, so nothing generic such as
``core`` or ``config`` lands at the top of site-packages.
"""

from setuptools import find_packages, setup

TOP_LEVEL = ("core", "wire", "gateway", "bridges", "client", "config", "pipeline")

packages = ["waystation"] + [
    f"waystation.{name}" for name in find_packages(include=[f"{t}*" for t in TOP_LEVEL])
]
setup(
    packages=packages,
    package_dir={"waystation": "waystation", **{f"waystation.{t}": t for t in TOP_LEVEL}},
)
