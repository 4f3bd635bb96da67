"""Waystation: core/store."""
