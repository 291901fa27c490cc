"""Broker security: TLS, token authentication and per-namespace/topic permissions.

Everything here is off unless the config turns it on; `settings.SecuritySettings`
reads the config once and says which parts are on.
"""
