"""The CLI's security: `stableline tokens ...`, `admin permissions ...`, client credentials.

Client and admin commands take `--token` (or STABLELINE_TOKEN) and
`--tls-trust-certs-file` (or STABLELINE_TLS_TRUST_CERTS_FILE); the options store
them on the click context, so commands pass them on without naming them.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import click

_TOKEN = "stableline_token"
_TRUST = "stableline_tls_trust_certs_file"


def _remember(key: str):
    def callback(context: click.Context, _param: click.Parameter, value: Any) -> Any:
        context.meta[key] = value
        return value

    return callback


def credential_options(function):
    """Adds --token and --tls-trust-certs-file to a command that talks to a broker."""
    function = click.option(
        "--tls-trust-certs-file",
        envvar="STABLELINE_TLS_TRUST_CERTS_FILE",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        expose_value=False,
        callback=_remember(_TRUST),
        help="CA certificate of a TLS broker (turns TLS on).",
    )(function)
    return click.option(
        "--token",
        envvar="STABLELINE_TOKEN",
        default=None,
        expose_value=False,
        callback=_remember(_TOKEN),
        help="Authentication token (see `stableline tokens create`).",
    )(function)


def client_credentials() -> dict[str, Any]:
    """Keyword arguments for stableline.Client from this command's options."""
    import stableline

    meta = click.get_current_context().meta
    options: dict[str, Any] = {}
    if meta.get(_TOKEN):
        options["authentication"] = stableline.AuthenticationToken(meta[_TOKEN])
    if meta.get(_TRUST):
        options["tls_trust_certs_file_path"] = meta[_TRUST]
    return options


def admin_request(admin_url: str, path: str, method: str = "GET", body: Any = None) -> Any:
    """One HTTP admin call with this command's token and CA; the JSON answer (None if empty).
    A redirect to the topic's owner (a cluster's brokers answer 307 for the topics
    others own) is followed with the same method, body and token."""
    meta = click.get_current_context().meta
    # Every call says it is no browser form (http_csrf.py); a body is JSON.
    headers = {"X-Stableline-Request": "cli"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    if meta.get(_TOKEN):
        headers["Authorization"] = f"Bearer {meta[_TOKEN]}"
    context = None
    if meta.get(_TRUST):
        context = ssl.create_default_context(cafile=str(meta[_TRUST]))
    request = urllib.request.Request(
        admin_url.rstrip("/") + path,
        data=json.dumps(body).encode() if body is not None else None,
        headers=headers,
        method=method,
    )
    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=context), _SameRequestRedirects()
    )
    try:
        with opener.open(request, timeout=30) as response:
            raw = response.read()
            return json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        try:
            reason = json.loads(error.read()).get("reason", "")
        except (ValueError, AttributeError):
            reason = ""
        raise click.ClickException(f"{error.code}: {reason or error.reason}") from None
    except CredentialsNotForwarded as error:
        raise click.ClickException(str(error.reason)) from None
    except urllib.error.URLError as error:
        raise click.ClickException(_unreachable(admin_url, error.reason)) from None
    except (ConnectionError, http.client.HTTPException) as error:
        # A plaintext request to a TLS port: the server hangs up without an answer.
        raise click.ClickException(_unreachable(admin_url, error)) from None


def _origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


class CredentialsNotForwarded(urllib.error.URLError):
    """A redirect would carry the token to another origin, or from https to http."""

    def __init__(self, source: str, target: str):
        self.source, self.target = source, target
        downgrade = _origin(source)[0] == "https" and _origin(target)[0] != "https"
        why = "from https to plaintext http" if downgrade else "to another address"
        super().__init__(
            f"{source} redirected this call {why} ({target}); the token is not sent "
            f"there. If that is a broker of your cluster (a topic's owner), run the "
            f"command again with --admin-url {_base_url(target)}"
        )


def _base_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class _SameRequestRedirects(urllib.request.HTTPRedirectHandler):
    """307 and 308 repeat the request as it was, whatever its method (urllib follows
    them for GET and HEAD only). A request carrying a token follows a redirect only
    within its origin (scheme, host, port), as curl -L keeps credentials: a redirect
    elsewhere, or from https to http, is refused (CredentialsNotForwarded) rather than
    sending the token to whoever the Location names."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if req.has_header("Authorization") and _origin(newurl) != _origin(req.full_url):
            raise CredentialsNotForwarded(req.full_url, newurl)
        if code not in (307, 308):
            return super().redirect_request(req, fp, code, msg, headers, newurl)
        return urllib.request.Request(
            newurl,
            data=req.data,
            headers=dict(req.headers),
            method=req.get_method(),
            origin_req_host=req.origin_req_host,
            unverifiable=True,
        )


_HTTP_TLS_HINT = (
    "if the broker serves TLS, use an https:// --admin-url with --tls-trust-certs-file CA.pem "
    "(a broker started with --secure writes DATA_DIR/security/ca.pem)"
)


def _unreachable(admin_url: str, reason: object) -> str:
    """Why the admin API did not answer, with the TLS hint only when TLS may be why."""
    text = f"cannot reach {admin_url}: {reason}"
    if isinstance(reason, ConnectionRefusedError) or "refused" in str(reason).lower():
        return f"{text} (is the broker running, and is --admin-url its HTTP address?)"
    if isinstance(reason, ssl.SSLError):
        return (
            f"{text} (TLS failed: check that --tls-trust-certs-file is the CA of the broker's "
            "certificate; if the broker does not serve TLS, use an http:// --admin-url)"
        )
    if admin_url.startswith("http://"):
        return f"{text} ({_HTTP_TLS_HINT})"
    return text


# The client library's own hint names its keyword arguments; the CLI names its flags.
_LIBRARY_HINT = re.compile(r" \(if the broker serves TLS[^()]*\)")


def broker_error(error: Exception, service_url: str) -> click.ClickException:
    """A client error as one line; an unreachable broker gets the CLI's TLS hint only
    when TLS may be the cause (not when nothing listens at the address)."""
    meta = click.get_current_context().meta
    tls = bool(meta.get(_TRUST)) or service_url.startswith("stableline+ssl://")
    return click.ClickException(
        explain_unavailable(f"{type(error).__name__}: {error}", service_url, tls)
    )


def explain_unavailable(text: str, service_url: str, tls: bool) -> str:
    """`text` (a client error's `Type: message`) in the CLI's words: the library's hint
    names keyword arguments, this one names flags, and only where TLS may be why."""
    text = _LIBRARY_HINT.sub("", text)
    if "BrokerUnavailable" not in text:
        return text
    if "refused" in text.lower():
        return (
            f"BrokerUnavailable: nothing listens at {service_url} (connection refused): "
            "is the broker running, and is --service-url its gRPC address?"
        )
    if tls:
        hint = (
            "TLS may be why: check that --tls-trust-certs-file is the CA of the broker's "
            "certificate; if the broker does not serve TLS, leave --tls-trust-certs-file out"
        )
    else:
        hint = (
            "if the broker serves TLS, pass --tls-trust-certs-file CA.pem (a broker started "
            "with --secure writes DATA_DIR/security/ca.pem)"
        )
    return f"{text} ({hint})"


# ---------------------------------------------------------------- tokens


@click.group()
def tokens() -> None:
    """Make keys and tokens for token authentication (as `pulsar tokens`)."""


def _write_private(path: Path, data: bytes) -> None:
    """Write a key readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)


@tokens.command("create-secret-key")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--base64", "as_base64", is_flag=True, help="Write base64 text, not raw bytes.")
def create_secret_key(output: Path | None, as_base64: bool) -> None:
    """A random HS256 secret key, to a file (or base64 on stdout)."""
    from stableline.broker.security.tokens import create_secret_key as make

    key = make()
    if output is None:
        click.echo("base64:" + base64.b64encode(key).decode())
        return
    _write_private(output, b"base64:" + base64.b64encode(key) if as_base64 else key)
    click.echo(f"secret key written to {output}", err=True)


@tokens.command("create-key-pair")
@click.option(
    "--output-private-key", type=click.Path(dir_okay=False, path_type=Path), required=True
)
@click.option("--output-public-key", type=click.Path(dir_okay=False, path_type=Path), required=True)
def create_key_pair(output_private_key: Path, output_public_key: Path) -> None:
    """An RS256 key pair: the private key signs tokens, the broker holds only the public one."""
    from stableline.broker.security.tokens import create_key_pair as make

    private, public = make()
    _write_private(output_private_key, private)
    output_public_key.write_bytes(public)
    click.echo(f"private key {output_private_key}, public key {output_public_key}", err=True)


@tokens.command("create")
@click.option("--subject", "-s", required=True, help="The role the token speaks for.")
@click.option(
    "--secret-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Sign with this HS256 secret key file.",
)
@click.option(
    "--private-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Sign with this RS256 private key file.",
)
@click.option("--expiry-time", default=None, help="e.g. 30m, 1h, 7d; none = no expiry.")
def create_token(
    subject: str, secret_key: Path | None, private_key: Path | None, expiry_time: str | None
) -> None:
    """Print a token for role SUBJECT."""
    from stableline.broker.security.tokens import create_token as make
    from stableline.broker.security.tokens import parse_duration, read_secret_key

    if (secret_key is None) == (private_key is None):
        raise click.UsageError("give exactly one of --secret-key or --private-key")
    try:
        expiry = parse_duration(expiry_time) if expiry_time else None
        token = make(
            subject,
            secret_key=read_secret_key(secret_key) if secret_key else None,
            private_key=private_key.read_bytes() if private_key else None,
            expiry_seconds=expiry,
        )
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    click.echo(token)


# ---------------------------------------------------------------- permissions


_admin_url_option = click.option("--admin-url", default="http://127.0.0.1:8080", show_default=True)


@click.group()
def permissions() -> None:
    """Grant, list and revoke produce/consume per namespace or topic."""


def _resource_path(target: str) -> str:
    """'tenant/namespace' or a topic name -> its permissions path."""
    from stableline.topic_name import InvalidTopicNameError, TopicName

    if "://" not in target and target.count("/") == 1:
        return f"/admin/v2/namespaces/{target}/permissions"
    try:
        name = TopicName.parse(target)
    except InvalidTopicNameError as error:
        raise click.BadParameter(str(error)) from None
    return f"/admin/v2/persistent/{name.storage_name}/permissions"


@permissions.command("grant")
@click.argument("target")
@click.argument("role")
@click.option(
    "--actions",
    "-a",
    required=True,
    help="Comma-separated: produce,consume.",
)
@_admin_url_option
@credential_options
def grant(target: str, role: str, actions: str, admin_url: str) -> None:
    """Let ROLE produce and/or consume on TARGET (tenant/namespace or a topic)."""
    chosen = [a.strip() for a in actions.split(",") if a.strip()]
    admin_request(admin_url, f"{_resource_path(target)}/{role}", "POST", chosen)
    click.echo(f"{role}: {', '.join(chosen)} on {target}")


@permissions.command("revoke")
@click.argument("target")
@click.argument("role")
@_admin_url_option
@credential_options
def revoke(target: str, role: str, admin_url: str) -> None:
    """Take ROLE's grant on TARGET away."""
    admin_request(admin_url, f"{_resource_path(target)}/{role}", "DELETE")
    click.echo(f"{role}: revoked on {target}")


@permissions.command("list")
@click.argument("target")
@_admin_url_option
@credential_options
def list_permissions(target: str, admin_url: str) -> None:
    """Print the grants on TARGET (a topic's include its namespace's)."""
    json.dump(admin_request(admin_url, _resource_path(target)), sys.stdout, indent=2)
    click.echo()


# ---------------------------------------------------------------- serve


_SERVE = "stableline_serve_security"


def serve_security_options(function):
    """The security flags of `stableline serve`, kept together on the click context."""
    flags = [
        ("--tls-cert", "tls_cert_file", "Server certificate (PEM): TLS on both ports."),
        ("--tls-key", "tls_key_file", "Server private key (PEM)."),
        ("--tls-client-ca", "tls_trust_certs_file", "Require client certificates signed by it."),
        (
            "--auth-token-secret-key",
            "token_secret_key",
            "HS256 secret key file: turns on token authentication and authorization.",
        ),
        (
            "--auth-token-public-key",
            "token_public_key",
            "RS256 public key file: turns on token authentication and authorization.",
        ),
    ]

    def remember(context: click.Context, param: click.Parameter, value: Any) -> Any:
        context.meta.setdefault(_SERVE, {})[param.name] = value
        return value

    for flag, name, text in reversed(flags):
        function = click.option(
            flag,
            name,
            type=click.Path(exists=True, dir_okay=False),
            default=None,
            expose_value=False,
            callback=remember,
            help=text,
        )(function)
    function = click.option(
        "--superuser-roles",
        "superuser_roles",
        default=None,
        expose_value=False,
        callback=remember,
        help="Comma-separated roles that may do anything.",
    )(function)
    return click.option(
        "--secure",
        is_flag=True,
        default=False,
        expose_value=False,
        callback=remember,
        help="TLS + token authentication + authorization; missing files are made "
        "under DATA_DIR/security (ca.pem to trust, admin.token for the superuser).",
    )(function)


def serve_security_overrides() -> dict[str, Any]:
    """Config overrides from the flags (None = not given); a token key turns auth on."""
    flags = dict(click.get_current_context().meta.get(_SERVE, {}))
    flags.pop("secure", None)
    if flags.get("token_secret_key") or flags.get("token_public_key"):
        flags["authentication_enabled"] = True
        flags["authorization_enabled"] = True
    return flags


def finish_serve_config(config):
    """Apply --secure, then check the security settings; errors are usage errors."""
    from stableline.broker.security.settings import SecuritySettings

    if click.get_current_context().meta.get(_SERVE, {}).get("secure"):
        from stableline.broker.security.bootstrap import secure

        setup = secure(config)
        config = setup.config
        if setup.ca_file is not None:
            click.echo(f"TLS: clients trust {setup.ca_file}", err=True)
        if setup.superuser_token_file is not None:
            click.echo(f"superuser token (role admin): {setup.superuser_token_file}", err=True)
    SecuritySettings.from_config(config)
    return config
