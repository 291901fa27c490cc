"""TLS for both ports from one set of files: gRPC server credentials and an SSL context.

With a trust file (a client CA), a client without a certificate signed by it is
refused during the handshake, before any RPC or HTTP request is read.
"""

from __future__ import annotations

import ssl

import grpc

from stableline.broker.security.settings import TlsFiles


def grpc_server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    trust = files.trust_certs_file.read_bytes() if files.trust_certs_file else None
    return grpc.ssl_server_credentials(
        [(files.key_file.read_bytes(), files.cert_file.read_bytes())],
        root_certificates=trust,
        require_client_auth=trust is not None,
    )


def http_ssl_context(files: TlsFiles) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(files.cert_file, files.key_file)
    if files.trust_certs_file is not None:
        context.load_verify_locations(files.trust_certs_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context
