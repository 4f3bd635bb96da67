"""TLS client certificates as logins (SASL EXTERNAL, MQTT over TLS): a user's configured
subject maps a verified certificate to that user; nothing else logs in by it."""

from __future__ import annotations

import pytest

from waystation.config.schema import Config
from waystation.core.authentication import Authenticator
from waystation.core.security import AuthenticationError
from waystation.gateway.admission import certificate_subject
from waystation.gateway.core_config import security_manager

CFG = {
    "security": {"enabled": True},
    "users": [
        {"name": "device", "certificate": "CN=device-1,O=Acme\\, Inc,C=DE", "roles": ["dev"]},
        {"name": "alice", "password": "pw", "roles": ["ops"]},
    ],
}

PEER = {  # what ssl.SSLSocket.getpeercert() gives for a verified certificate
    "subject": (
        (("countryName", "DE"),),
        (("organizationName", "Acme, Inc"),),
        (("commonName", "device-1"),),
    )
}


def test_subject_text_is_rfc4514_most_specific_first():
    assert certificate_subject(PEER) == "CN=device-1,O=Acme\\, Inc,C=DE"
    assert certificate_subject(None) is None and certificate_subject({}) is None


def test_certificate_maps_to_its_user_and_nothing_else(run):
    sec = security_manager(Config.model_validate(CFG))
    auth = Authenticator(sec)
    p = auth.certificate(certificate_subject(PEER), "127.0.0.1:1")
    assert p.name == "device" and p.roles == frozenset({"dev"})
    with pytest.raises(AuthenticationError, match="authentication failed: no user has"):
        auth.certificate("CN=device-2,O=Acme\\, Inc,C=DE", "127.0.0.1:1")
    with pytest.raises(AuthenticationError, match="no client certificate"):
        auth.certificate(None, "127.0.0.1:1")

    async def no_password_login():
        for pw in ("", None):  # a certificate-only user has no password at all
            with pytest.raises(AuthenticationError):
                await auth.authenticate("device", pw, "127.0.0.1:2")

    run(no_password_login())
    auth.close()


def test_a_user_needs_a_password_or_a_certificate():
    with pytest.raises(Exception, match="password or password_hash"):
        Config.model_validate({"users": [{"name": "nobody"}]})
