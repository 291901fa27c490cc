"""What security costs: the same calls against a plaintext broker, one with token
authentication and authorization, and one with TLS on top, each a real process.

- unary: sequential GetLastMessageId calls (each one authenticated and authorized;
  verified tokens are cached, so this is the interceptor's per-call cost);
- produce: `--messages` 100-byte messages through one producer (the stream is
  checked once when it opens; TLS costs per byte).
Prints calls/s and messages/s (best of --rounds), and each mode's ratio against
plaintext.

    python scripts/bench/bench_security.py [--calls N] [--messages N] [--rounds N] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from stableline.aio import AuthenticationToken, Client
from stableline.broker.security.certificates import CertificateAuthority
from stableline.broker.security.tokens import create_secret_key, create_token
from stableline.testing import temporary_broker

PAYLOAD = b"x" * 100


async def measure(url: str, client_options: dict, calls: int, messages: int) -> dict:
    async with Client(url, **client_options) as client:
        producer = await client.create_producer("bench-security")
        await producer.send(b"warm-up")
        started = time.perf_counter()
        for _ in range(calls):
            await client.get_last_message_id("bench-security")
        unary_s = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(messages):
            producer.send_async(PAYLOAD, lambda error, _id: None)
        await producer.flush()
        produce_s = time.perf_counter() - started
    return {"unary_calls_per_s": calls / unary_s, "produce_msgs_per_s": messages / produce_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-security-"))
    secret = work / "secret.key"
    secret.write_bytes(create_secret_key())
    authority = CertificateAuthority()
    server = authority.issue_server()
    (work / "ca.pem").write_bytes(authority.cert_pem)
    (work / "server.pem").write_bytes(server.cert_pem)
    (work / "server-key.pem").write_bytes(server.key_pem)
    token = AuthenticationToken(create_token("admin", secret_key=secret.read_bytes()))
    auth = ["--auth-token-secret-key", str(secret), "--superuser-roles", "admin"]
    tls = ["--tls-cert", str(work / "server.pem"), "--tls-key", str(work / "server-key.pem")]
    modes = {
        "plaintext": ([], {}),
        "token": (auth, {"authentication": token}),
        "tls+token": (
            [*auth, *tls],
            {"authentication": token, "tls_trust_certs_file_path": work / "ca.pem"},
        ),
    }
    # All three brokers up at once and measured in turns, best of --rounds: on a shared
    # machine a burst of other load then hurts one round, not one mode.
    results: dict[str, dict] = {}
    try:
        with contextlib.ExitStack() as stack:
            brokers = {
                name: stack.enter_context(temporary_broker(work, extra_args=broker_args))
                for name, (broker_args, _) in modes.items()
            }
            for _ in range(args.rounds):
                for name, (_, client_options) in modes.items():
                    result = asyncio.run(
                        measure(
                            brokers[name].service_url, client_options, args.calls, args.messages
                        )
                    )
                    best = results.setdefault(name, result)
                    for key, value in result.items():
                        best[key] = max(best[key], value)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = results["plaintext"]
    print(f"{'mode':<12}{'unary calls/s':>16}{'ratio':>8}{'produce msg/s':>16}{'ratio':>8}")
    for name, result in results.items():
        unary, produce = result["unary_calls_per_s"], result["produce_msgs_per_s"]
        print(
            f"{name:<12}{unary:>16,.0f}{unary / base['unary_calls_per_s']:>8.2f}"
            f"{produce:>16,.0f}{produce / base['produce_msgs_per_s']:>8.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
