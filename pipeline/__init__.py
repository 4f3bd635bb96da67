"""Waystation: pipeline."""
