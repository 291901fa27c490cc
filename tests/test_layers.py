"""The layers of ../docs/design/packages.md, read from every module's imports.

Imports run one way: the engines (managed_ledger <- txnbuffer <- dispatcher) know
nothing of stableline; the broker's core (topics <- security <- cluster <- txn) knows
nothing of its faces (gRPC, HTTP, Kafka), which know nothing of the app that wires
them; the client SDK never imports the broker, and the broker never imports the
client's private modules. Within the broker and the Kafka face, no two packages
import each other, directly or round a cycle. Every import counts, those inside a
function or under TYPE_CHECKING too: a cycle that only typing sees is still one a
reader has to hold in their head.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("managed_ledger", "txnbuffer", "dispatcher", "stableline")

# The broker's packages, lowest first; a module may import its own package and
# any package below it, never one above or beside it on the same rank.
BROKER_RANKS: dict[str, int] = {
    "config": 0,
    "config_reference": 1,  # the configuration reference page, made from config
    "errors": 0,
    "failpoints": 0,
    "topics": 1,
    "security": 2,
    "cluster": 3,
    "txn": 4,
    "observability": 5,
    "connections": 5,
    "grpc": 6,
    "http": 6,
    "kafka": 6,
    "app": 7,
}
KAFKA_RANKS = {"protocol": 0, "coordinator": 1, "server": 2}

# Modules of the stableline package both the client and the broker may import.
SHARED = (
    "stableline._proto",
    "stableline.error_codes",
    "stableline.metadata",
    "stableline.names",
    "stableline.partitions",
    "stableline.topic_name",
    "stableline.wire",
)
CLIENT = (
    "stableline._",
    "stableline.aio",
    "stableline.spark",
)
TOOLS = (
    "stableline.__main__",
    "stableline.cli",
    "stableline.local_cluster",
    "stableline.testing",
    "stableline.demo",
)
# Only these broker packages speak protobuf: the gRPC face, and the Kafka face, whose
# records become entries in the protobuf-framed batch format.
PROTOBUF_FACES = ("grpc", "kafka")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "_proto" not in path.parts or path.name == "__init__.py"
    }


MODULES = all_modules()


def imports_of(name: str, path: Path) -> set[str]:
    """The project modules `name` imports, resolved to the longest known module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target in MODULES and target != name:
                found.add(target)
    return found


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p if p.endswith("_") else p + ".") for p in prefixes)


def broker_package(name: str) -> str | None:
    """`topics` for stableline.broker.topics.registry; None outside the broker."""
    parts = name.split(".")
    if parts[:2] != ["stableline", "broker"] or len(parts) < 3:
        return None
    return parts[2]


def kafka_package(name: str) -> str | None:
    parts = name.split(".")
    if parts[:3] != ["stableline", "broker", "kafka"] or len(parts) < 4:
        return None
    return parts[3]


def violations() -> list[str]:
    found = []
    for name, targets in sorted(GRAPH.items()):
        for target in sorted(targets):
            reason = why_not(name, target)
            if reason:
                found.append(f"{name} imports {target}: {reason}")
    return found


def why_not(name: str, target: str) -> str | None:
    top, target_top = name.split(".")[0], target.split(".")[0]
    engines = ["managed_ledger", "txnbuffer", "dispatcher"]
    if top in engines:
        if target_top == "stableline":
            return "an engine imports stableline"
        if engines.index(target_top) > engines.index(top):
            return "an engine imports one above it"
        return None
    if target == "stableline.testing" and under(
        name, ("stableline.local_cluster", "stableline.demo", "stableline.cli")
    ):
        return "production code imports the test helpers"
    if under(name, TOOLS):
        return None
    if (
        under(name, CLIENT)
        or name in ("stableline", "stableline.perf")
        or under(name, ("stableline.perf",))
    ):
        if under(target, ("stableline.broker", *TOOLS)):
            return "the client SDK imports the broker or a tool"
        return None
    if under(name, SHARED):
        if not under(target, SHARED) and target.split(".")[0] == "stableline":
            return "a shared module imports beyond the shared modules"
        return None
    package = broker_package(name)
    if package is None:
        return None
    if under(target, ("stableline._proto",)):
        if package not in PROTOBUF_FACES:
            return "protobuf past the faces' codecs"
        return None
    if under(target, SHARED):
        return None
    if under(target, CLIENT) or target == "stableline" or under(target, TOOLS):
        return "the broker imports the client's private modules or a tool"
    target_package = broker_package(target)
    if target_package is None or target_package == package:
        if package == "kafka" and target_package == "kafka":
            return kafka_rule(name, target)
        return None
    assert package in BROKER_RANKS, f"{name}: a broker package with no rank in this test"
    assert target_package in BROKER_RANKS, f"{target}: a broker package with no rank"
    if BROKER_RANKS[target_package] >= BROKER_RANKS[package]:
        return f"{package} may not import {target_package} (not below it)"
    return None


def kafka_rule(name: str, target: str) -> str | None:
    package, target_package = kafka_package(name), kafka_package(target)
    if package is None or target_package is None or package == target_package:
        return None
    if KAFKA_RANKS[target_package] >= KAFKA_RANKS[package]:
        return f"kafka.{package} may not import kafka.{target_package}"
    return None


def package_cycles() -> list[list[str]]:
    """Cycles among packages (each module counted in its own package)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, targets in GRAPH.items():
        for target in targets:
            a, b = package_of(name), package_of(target)
            if a != b and not b.startswith(a + ".") and not a.startswith(b + "."):
                edges[a].add(b)
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return cycles


def package_of(name: str) -> str:
    path = MODULES[name]
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def test_the_layout_is_what_the_ranks_name():
    broker = ROOT / "stableline" / "broker"
    packages = {p.name for p in broker.iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in broker.glob("*.py") if p.name != "__init__.py"}
    assert packages | modules == set(BROKER_RANKS) - {"errors"} | ({"errors"} & modules)
    assert len(modules) <= 4, f"modules that belong to no layer: {sorted(modules)}"


def test_imports_run_downward_only():
    found = sorted(violations())
    assert not found, "\n".join(found)


def test_no_package_imports_itself_round_a_cycle():
    cycles = sorted(" -> ".join(cycle) for cycle in package_cycles())
    assert not cycles, "\n".join(cycles)


@pytest.mark.parametrize(
    ("importer", "imported", "allowed"),
    [
        ("stableline.broker.topics.registry", "stableline.broker.grpc.errors", False),
        ("stableline.broker.grpc.errors", "stableline.broker.topics.registry", True),
        ("stableline.broker.http.app", "stableline.broker.grpc.convert", False),
        ("stableline.aio._client", "stableline.broker.topics.registry", False),
        ("stableline.broker.topics.topic", "stableline._errors", False),
        ("managed_ledger.ledger", "stableline.topic_name", False),
        ("dispatcher.subscription", "txnbuffer", True),
        ("txnbuffer.buffer", "dispatcher", False),
        ("stableline.local_cluster.supervisor", "stableline.testing", False),
        ("stableline.broker.txn.coordinators", "stableline._proto.broker_pb2", False),
        ("stableline.broker.grpc.convert", "stableline._proto.broker_pb2", True),
        ("stableline.broker.kafka.protocol.codec", "stableline.broker.kafka.server.handler", False),
    ],
)
def test_the_rules_refuse_what_they_should(importer, imported, allowed):
    """The checker itself: each rule refuses an import of the kind it forbids."""
    assert (why_not(importer, imported) is None) is allowed
