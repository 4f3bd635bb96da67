"""Waystation: a protocol gateway and bridge service.

The subpackages live in the repository's top-level folders (core/, wire/, gateway/, bridges/,
client/, config/, pipeline/) and are installed under this one name.
"""

__version__ = "0.1.0"
