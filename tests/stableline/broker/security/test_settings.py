"""Security settings: off by default; combinations that only look secure are refused."""

from __future__ import annotations

import os

import pytest

from stableline.broker.config import load_config
from stableline.broker.security.settings import SecuritySettings


def settings(**overrides) -> SecuritySettings:
    return SecuritySettings.from_config(load_config(None, overrides))


def test_everything_is_off_by_default(monkeypatch):
    for key in list(os.environ):
        if key.startswith("STABLELINE_"):
            monkeypatch.delenv(key)
    defaults = settings()
    assert defaults.tls is None and not defaults.authentication_enabled


def test_superuser_roles_come_from_a_list_or_comma_separated_text(tmp_path, monkeypatch):
    config_file = tmp_path / "broker.toml"
    config_file.write_text('superuser_roles = ["admin", "ops"]\n')
    assert load_config(config_file).superuser_roles == ("admin", "ops")
    monkeypatch.setenv("STABLELINE_SUPERUSER_ROLES", "root, ops ,")
    assert load_config(None).superuser_roles == ("root", "ops")


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        ({"tls_cert_file": "c.pem"}, "both tls_cert_file and tls_key_file"),
        ({"tls_trust_certs_file": "ca.pem"}, "needs tls_cert_file"),
        ({"authentication_enabled": True}, "exactly one of token_secret_key"),
        (
            {"authentication_enabled": True, "token_secret_key": "a", "token_public_key": "b"},
            "exactly one",
        ),
        ({"authorization_enabled": True}, "needs authentication_enabled"),
        ({"authentication_enabled": True, "token_secret_key": "missing.key"}, "does not exist"),
    ],
)
def test_half_configured_security_is_refused(overrides, complaint):
    with pytest.raises(ValueError, match=complaint):
        settings(**overrides)
