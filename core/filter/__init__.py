"""Waystation: core/filter."""
