"""Write the generated pages of docs/ (`make docs`): the configuration reference and
the error codes (from stableline/error_codes.py and the client's table).

    python scripts/dev/gen_docs.py [--check]

--check writes nothing and exits 1 when a committed page differs from what it would
write (tests/test_docs.py runs the same comparison).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from stableline import _errors as client_errors  # noqa: E402
from stableline import error_codes  # noqa: E402
from stableline.broker import config_reference  # noqa: E402

CONFIG_PAGE = REPO / "docs" / "reference" / "configuration.md"
ERRORS_PAGE = REPO / "docs" / "reference" / "errors.md"

ERRORS_INTRO = """\
# Error codes

<!-- Written by `make docs` from stableline/error_codes.py: edit the table there. -->

Every refusal the broker sends carries a stable code beside its gRPC status: in the
trailing metadata key `stableline-error`, or in the error field of a stream's
response (a send's receipt, an ack's answer). The client SDK raises the exception
named below, all of them subclasses of `stableline.StableLineError` (`stableline.aio`
raises the same). A code the client does not know is raised by its gRPC status:
`RESOURCE_EXHAUSTED` as `LimitExceeded`, `UNAVAILABLE` as `BrokerUnavailable`,
`DEADLINE_EXCEEDED` as `Timeout`, `NOT_FOUND` as `TopicNotFound`, `INVALID_ARGUMENT`
as `InvalidArgument`, `UNAUTHENTICATED` and `PERMISSION_DENIED` as
`AuthenticationError` and `AuthorizationError`, anything else as `StableLineError`.
Each newer, more exact exception derives from the one its status gave before
(`TooManyTopics` is a `LimitExceeded`, `IdleStream` a `Timeout`).

The HTTP admin API answers the same refusals with the status in the HTTP column and
a JSON body `{"reason": "..."}`; the Kafka port answers with Kafka's own error codes
(last column; see [Kafka clients](../clients/kafka.md) for each API's).

"""

ERRORS_NOTES = """
The client follows `NotOwner` by looking the topic up again, and raises it only once
those retries are spent. A fenced broker (`BrokerFenced`) is one out of its cluster:
see [when etcd is away](../concepts/cluster.md#when-etcd-is-away).

Where one API means something more exact, it answers its own code: HTTP answers
`NotOwner` with a redirect (307) to the same request at the owner; Kafka's
CreateTopics and DeleteTopics answer `LEADER_NOT_AVAILABLE` while a topic cannot be
placed, and `INVALID_PARTITIONS` for a bad partition count; Produce answers
`INVALID_RECORD` for a record it cannot store; group requests answer
`GROUP_AUTHORIZATION_FAILED` where topics answer `TOPIC_AUTHORIZATION_FAILED`.

The broker's exceptions all derive from `stableline.broker.errors.BrokerError` and
name their code; tests/test_error_codes.py checks that every code here is known to
the client and that each face answers as the table says.
"""


def render_errors() -> str:
    """The error codes page: one row per code of the table, then the client's own."""
    lines = [
        "| code | gRPC status | client exception | HTTP | Kafka | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for row in error_codes.ROWS:
        kind = client_errors.CODES[row.code].__name__
        kafka = "" if row.kafka_error is None else row.kafka_error.name
        lines.append(
            f"| `{row.code}` | {row.grpc_status.name} | `{kind}` | {row.http_status} "
            f"| {kafka} | {row.meaning} |"
        )
    for code in sorted(set(client_errors.CODES) - set(error_codes.ERROR_CODES)):
        kind = client_errors.CODES[code]
        meaning = " ".join((kind.__doc__ or "").split())
        lines.append(f"| `{code}` | | `{kind.__name__}` | | | (raised by the client) {meaning} |")
    return ERRORS_INTRO + "\n".join(lines) + "\n" + ERRORS_NOTES


def serve_flags() -> dict[str, str]:
    """Each config key that `stableline serve` takes as a flag, with the flag. The
    command is found as the console script names it in pyproject.toml."""
    with open(REPO / "pyproject.toml", "rb") as handle:
        target = tomllib.load(handle)["project"]["scripts"]["stableline"]
    module_name, _, attribute = target.partition(":")
    serve = getattr(importlib.import_module(module_name), attribute).commands["serve"]
    keys = set(config_reference.all_key_names())
    return {param.name: param.opts[0] for param in serve.params if param.name in keys}


def pages() -> dict[Path, str]:
    """Each generated page and the text it should hold."""
    return {
        CONFIG_PAGE: config_reference.render(serve_flags()),
        ERRORS_PAGE: render_errors(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args()
    stale = []
    for path, text in pages().items():
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
    for path in stale:
        print(f"{path.relative_to(REPO)} is stale: run `make docs`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
