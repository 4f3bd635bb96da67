"""Waystation: gateway/stomp."""
