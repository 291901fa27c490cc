"""The docs hold: every Python example in README.md and docs/ runs against a real
broker, every link to a page or a repository file resolves, and the generated
pages (the configuration reference, naming every key, and the error codes)
are current.

Examples are written for a broker on its default addresses (gRPC 127.0.0.1:6650, HTTP
127.0.0.1:8080, Kafka 127.0.0.1:9092); each runs as a program of its own in a
subprocess, with those addresses rewritten to this module's broker. An example that
cannot run here (it needs Spark, a secure broker or a cluster) says so on its first
line: `# docs: no-run: <why>`.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from stableline.testing import temporary_broker

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
NO_RUN = "# docs: no-run:"
EXAMPLE_TIMEOUT_S = 60


@dataclass(frozen=True, slots=True)
class Example:
    page: Path
    line: int  # of the opening fence
    code: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return not self.code.lstrip().startswith(NO_RUN)


def _examples() -> list[Example]:
    found = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        opening = None
        for number, line in enumerate(lines, 1):
            if opening is None and line.strip() == "```python":
                opening = number
            elif opening is not None and line.strip() == "```":
                found.append(Example(page, opening, "\n".join(lines[opening : number - 1]) + "\n"))
                opening = None
    return found


EXAMPLES = _examples()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with temporary_broker(tmp_path_factory.mktemp("docs"), kafka_port=0) as process:
        yield process


def _for_this_broker(code: str, broker) -> str:
    return (
        code.replace("127.0.0.1:6650", broker.service_url)
        .replace("127.0.0.1:9092", broker.kafka_bootstrap)
        .replace("127.0.0.1:8080", broker.http_url.split("://", 1)[1])
    )


def test_the_pages_have_examples_and_most_run():
    running = [example for example in EXAMPLES if example.runs]
    assert len(running) >= 10, [example.name for example in EXAMPLES]
    assert len(running) >= 3 * (len(EXAMPLES) - len(running))


@pytest.mark.parametrize(
    "example", [example for example in EXAMPLES if example.runs], ids=lambda example: example.name
)
def test_example_runs_against_a_broker(example, broker, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, "-c", _for_this_broker(example.code, broker)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT_S,
    )
    assert run.returncode == 0, f"{example.name} failed:\n{run.stdout[-3000:]}{run.stderr[-3000:]}"


@pytest.mark.parametrize(
    "example",
    [example for example in EXAMPLES if not example.runs],
    ids=lambda example: example.name,
)
def test_an_example_left_out_says_why(example):
    first = example.code.lstrip().splitlines()[0]
    assert len(first[len(NO_RUN) :].strip()) >= 10, f"{example.name}: give the reason"


# ---------------------------------------------------------------- links

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of the page's headings."""
    text = _FENCE.sub("", page.read_text())
    anchors = set()
    for heading in re.findall(r"^#{1,6} +(.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def _links(page: Path) -> list[str]:
    text = _FENCE.sub("", page.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return [a or b for a, b in _LINK.findall(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_link_to_a_page_or_a_file_resolves(page):
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists() or (
            anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved)
        ):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_every_docs_page_is_reachable_from_the_index():
    seen, queue = set(), [ROOT / "docs" / "index.md"]
    while queue:
        page = queue.pop()
        if page in seen or page.suffix != ".md" or not page.exists():
            continue
        seen.add(page)
        for target in _links(page):
            if not re.match(r"^[a-z]+:", target) and target.partition("#")[0]:
                queue.append((page.parent / target.partition("#")[0]).resolve())
    pages = {page for page in PAGES if page.is_relative_to(ROOT / "docs")}
    assert pages - seen == set()


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 220


# ---------------------------------------------------------------- generated pages


def _generator():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts/dev/gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_pages_are_current():
    """The configuration reference (from config.py) and the error codes (from
    stableline/error_codes.py)."""
    for path, text in _generator().pages().items():
        assert path.exists(), f"{path.relative_to(ROOT)} is missing: run `make docs`"
        assert path.read_text() == text, (
            f"{path.relative_to(ROOT)} differs from its source's definitions: "
            "run `make docs` and commit the result"
        )


def test_every_config_key_is_in_the_reference_with_a_description():
    from stableline.broker import config_reference
    from stableline.broker.config import KEY_DESCRIPTIONS, LEDGER_KEY_DESCRIPTIONS

    keys = config_reference.all_key_names()
    described = {**KEY_DESCRIPTIONS, **LEDGER_KEY_DESCRIPTIONS}
    assert sorted(set(keys) - set(described)) == [], "describe these keys in config.py"
    assert sorted(set(described) - set(keys)) == [], "these described keys do not exist"
    page = (ROOT / "docs/reference/configuration.md").read_text()
    assert [key for key in keys if f"| `{key}` |" not in page] == []


def test_the_error_reference_names_every_code_the_client_knows():
    from stableline._errors import CODES

    page = (ROOT / "docs/reference/errors.md").read_text()
    assert [code for code in CODES if f"`{code}`" not in page] == []
