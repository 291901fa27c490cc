"""Authentication on the etcd that `stableline cluster up` runs: no one without a
password reads or writes the cluster's grants, registrations and ownership records.

`enable(endpoint, directory)` makes, once, a `root` user (etcd needs one to turn
authentication on; its password is the operator's, for `etcdctl --user root`) and a
`stableline-broker` user whose role reads and writes every key under `/` (what the
brokers use), each with a generated password kept in DIRECTORY/<user>.password
(0600, in the cluster's data dir), then turns authentication on. It speaks etcd's
v3 API through aetcd's stubs, as the metadata store does (no etcdctl needed).

Promises:
- Idempotent: run at every start. A cluster dir made before this existed (an open
  etcd with data) gets its users and authentication on the next start; a start cut
  short midway is finished by the next (each step tolerates "already exists", and
  once authentication is on the rest is done as root).
- The passwords never appear on a command line: brokers get the password file's
  path (`--metadata-store-password-file`) and the user in the URL
  (`etcd://stableline-broker@HOST:PORT`).
"""

from __future__ import annotations

import asyncio
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import grpc
from aetcd import rpc
from aetcd.utils import prefix_range_end

ROOT_USER = "root"
BROKER_USER = "stableline-broker"
BROKER_ROLE = "stableline-broker"
CALL_TIMEOUT_S = 10.0
# What etcd says when a step was done already, or when authentication is on.
_DONE_ALREADY = ("already exists", "already granted", "already added")
_AUTH_ON = ("user name is empty", "permission denied", "invalid auth token")


class EtcdAuthError(RuntimeError):
    """etcd refused a step of turning authentication on; the message says which."""


@dataclass(frozen=True, slots=True)
class EtcdCredentials:
    user: str
    password_file: Path


def password_file(directory: Path, user: str) -> Path:
    return directory / f"{user}.password"


def _password(directory: Path, user: str) -> str:
    """The user's password, made (and written 0600) the first time it is asked for."""
    path = password_file(directory, user)
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    password = secrets.token_urlsafe(24)
    directory.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(password + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    return password


def enable(endpoint: str, directory: Path, tls: dict[str, Path] | None = None) -> EtcdCredentials:
    """Users, role and authentication on the etcd at `endpoint` (HOST:PORT; over TLS
    with `tls`'s CA and client certificate when given); the brokers' credentials.
    EtcdAuthError if etcd refuses."""
    root_password = _password(directory, ROOT_USER)
    broker_password = _password(directory, BROKER_USER)
    asyncio.run(_enable(endpoint, root_password, broker_password, tls))
    return EtcdCredentials(BROKER_USER, password_file(directory, BROKER_USER))


def _channel(endpoint: str, tls: dict[str, Path] | None) -> grpc.aio.Channel:
    if tls is None:
        return grpc.aio.insecure_channel(endpoint)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=tls["ca"].read_bytes(),
        private_key=tls["client_key"].read_bytes(),
        certificate_chain=tls["client_cert"].read_bytes(),
    )
    return grpc.aio.secure_channel(endpoint, credentials)


async def _enable(
    endpoint: str, root_password: str, broker_password: str, tls: dict[str, Path] | None
) -> None:
    async with _channel(endpoint, tls) as channel:
        auth = rpc.AuthStub(channel)
        metadata: tuple[tuple[str, str], ...] | None = None

        async def step(method, request) -> None:
            nonlocal metadata
            for _attempt in (1, 2):
                try:
                    await method(request, timeout=CALL_TIMEOUT_S, metadata=metadata)
                    return
                except grpc.aio.AioRpcError as error:
                    details = error.details() or ""
                    if any(sign in details for sign in _DONE_ALREADY):
                        return
                    if metadata is None and any(sign in details for sign in _AUTH_ON):
                        # On already (a start cut short after AuthEnable): as root.
                        metadata = await _root_token(auth, root_password)
                        continue
                    raise EtcdAuthError(
                        f"etcd at {endpoint} refused {type(request).__name__}: {details}"
                    ) from None

        await step(auth.RoleAdd, rpc.AuthRoleAddRequest(name=ROOT_USER))
        await step(auth.UserAdd, rpc.AuthUserAddRequest(name=ROOT_USER, password=root_password))
        await step(auth.UserGrantRole, rpc.AuthUserGrantRoleRequest(user=ROOT_USER, role=ROOT_USER))
        await step(auth.RoleAdd, rpc.AuthRoleAddRequest(name=BROKER_ROLE))
        await step(
            auth.RoleGrantPermission,
            rpc.AuthRoleGrantPermissionRequest(
                name=BROKER_ROLE,
                perm=rpc.Permission(
                    permType=rpc.Permission.READWRITE,
                    key=b"/",
                    range_end=prefix_range_end(b"/"),
                ),
            ),
        )
        await step(auth.UserAdd, rpc.AuthUserAddRequest(name=BROKER_USER, password=broker_password))
        await step(
            auth.UserGrantRole, rpc.AuthUserGrantRoleRequest(user=BROKER_USER, role=BROKER_ROLE)
        )
        await step(auth.AuthEnable, rpc.AuthEnableRequest())


async def _root_token(auth: rpc.AuthStub, root_password: str) -> tuple[tuple[str, str], ...]:
    try:
        reply = await auth.Authenticate(
            rpc.AuthenticateRequest(name=ROOT_USER, password=root_password),
            timeout=CALL_TIMEOUT_S,
        )
    except grpc.aio.AioRpcError as error:
        raise EtcdAuthError(
            f"etcd has authentication on but refuses {ROOT_USER} with the password in its "
            f"data dir ({error.details()}): was its root password changed?"
        ) from None
    return (("token", reply.token),)
