"""The configuration reference page, made from the config's own definitions.

Every key of BrokerConfig and ManagedLedgerConfig with its type, default, environment
variable, `serve` flag (when it has one) and the description kept beside it in
config.py. docs/reference/configuration.md is this function's output (`make docs`);
tests/test_docs.py fails when the committed page differs from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from managed_ledger import ManagedLedgerConfig
from stableline.broker.config import (
    ENV_PREFIX,
    KEY_DESCRIPTIONS,
    LEDGER_KEY_DESCRIPTIONS,
    LIMIT_KEYS,
    BrokerConfig,
)

MIB = 1024 * 1024
REGENERATE = "make docs"


def broker_keys() -> list[dataclasses.Field]:
    return [field for field in dataclasses.fields(BrokerConfig) if field.name != "ledger"]


def ledger_keys() -> list[dataclasses.Field]:
    return list(dataclasses.fields(ManagedLedgerConfig))


def all_key_names() -> list[str]:
    return [field.name for field in broker_keys() + ledger_keys()]


def render(flags: Mapping[str, str] | None = None) -> str:
    """The page's markdown; `flags` maps a key to its `stableline serve` flag."""
    flags = flags or {}
    broker_defaults, ledger_defaults = BrokerConfig(), ManagedLedgerConfig()
    lines = [
        "# Configuration keys",
        "",
        f"<!-- Generated from stableline/broker/config.py by `{REGENERATE}`: do not edit. -->",
        "",
        "Every key the broker reads, as `stableline/broker/config.py` and",
        "`managed_ledger/config.py` define it. Give a key in a TOML file",
        "(`stableline serve --config broker.toml`), as an environment variable",
        "(`STABLELINE_` and the key in capitals), or, where it has one, as a flag of",
        "`stableline serve`; flags win over variables, which win over the file. An",
        "unknown key is an error. How to set them: [operations/configuration]"
        "(../operations/configuration.md).",
        "",
        "Limits marked *limit* bound a queue and must be at least 1.",
        "",
        "## Broker",
        "",
        *_table(broker_keys(), broker_defaults, KEY_DESCRIPTIONS, flags),
        "",
        "## Ledger",
        "",
        "The storage engine's keys, at the top level of the file or under `[ledger]`:",
        "",
        "```toml",
        "[ledger]",
        "max_entries_per_ledger = 50000",
        "fsync = true",
        "```",
        "",
        *_table(ledger_keys(), ledger_defaults, LEDGER_KEY_DESCRIPTIONS, flags),
    ]
    return "\n".join(lines) + "\n"


def _table(
    fields: list[dataclasses.Field],
    defaults: Any,
    descriptions: Mapping[str, str],
    flags: Mapping[str, str],
) -> list[str]:
    rows = [
        "| key | type | default | environment / flag | what it does |",
        "|---|---|---|---|---|",
    ]
    for field in fields:
        name = field.name
        value = getattr(defaults, name)
        where = f"`{ENV_PREFIX}{name.upper()}`"
        if name in flags:
            where += f"<br>`{flags[name]}`"
        text = descriptions.get(name, "")
        if name in LIMIT_KEYS:
            text = f"*limit.* {text}"
        rows.append(
            f"| `{name}` | {_type_name(value)} | {_default(value)} | {where} | {_cell(text)} |"
        )
    return rows


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Path):
        return "path"
    if isinstance(value, tuple):
        return "list of str"
    return type(value).__name__


def _default(value: Any) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Path):
        return f"`{value}`" if value.is_absolute() else f"`./{value}`"
    if isinstance(value, tuple):
        return "`[]`" if not value else f"`{list(value)}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, int) and value >= MIB and value % (MIB // 16) == 0:
        return f"`{value}` ({value / MIB:g} MiB)"
    if isinstance(value, int) and value >= 10_000:
        return f"`{value}` ({value:,})"
    return f"`{value}`"


def _cell(text: str) -> str:
    # A table cell is one line; a `|` would end it.
    return " ".join(text.split()).replace("|", "\\|")
