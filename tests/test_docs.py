"""The product documentation (docs/, README.md) stays true to the code and the alert rules.

- docs/operations.md lists every configuration key with the default and the environment
  variable the code has (keys and defaults come from ``Config`` itself, never a hand list);
- every alert in ops/prometheus/alerts.yaml has a runbook section headed by its name, and its
  ``runbook_url`` anchor lands on it;
- the documentation stands alone: no reference to a specification outside the repository;
- relative links point to files (and headings) that exist.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ticket_dispatcher.config import ENV_PREFIX, Config, load_config, masked

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
OPERATIONS = DOCS / "operations.md"
RUNBOOK = DOCS / "runbook.md"
ALERTS = ROOT / "ops" / "prometheus" / "alerts.yaml"
README = ROOT / "README.md"

# References a reader of the package cannot follow: the specification and design notes live
# outside the repository.
FOREIGN_REFERENCES = ("SPEC" + ".md", "SPEC \u00a7", "/work/" + "shared", "M\u00a7", "N\u00a7")

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_CONFIG_ROW = re.compile(r"^\|\s*`([a-z0-9_.]+)`\s*\|\s*`([^`]*)`\s*\|\s*`([A-Z0-9_]+)`\s*\|")


def doc_files() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


# --- reading markdown -----------------------------------------------------------------------


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def headings(text: str) -> list[str]:
    return [m[2] for line in prose_lines(text) if (m := _HEADING.match(line))]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = _INLINE_CODE.sub(lambda m: m[0].strip("`"), heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {anchor(heading) for heading in headings(path.read_text(encoding="utf-8"))}


def links(text: str) -> list[str]:
    targets = []
    for line in prose_lines(text):
        targets += _LINK.findall(_INLINE_CODE.sub("", line))
    return targets


def test_anchor_follows_github_rules():
    assert anchor("TicketDispatcherMoreThanOnePod") == "ticketdispatchermorethanonepod"
    assert anchor("From file to live: validate, test, dry run, activate") == (
        "from-file-to-live-validate-test-dry-run-activate")
    assert anchor("Regular expressions (RE2)") == "regular-expressions-re2"
    assert anchor("assign and `assign_l2`") == "assign-and-assign_l2"


def test_markdown_reader_ignores_headings_and_links_in_code():
    text = ("# Title\n```sh\n# a shell comment\n[x](missing.md)\n```\n"
            "see [y](ok.md) and `[z](no.md)`\n")
    assert headings(text) == ["Title"]
    assert links(text) == ["ok.md"]


# --- (a) configuration keys -----------------------------------------------------------------


def code_defaults() -> dict[str, Any]:
    """Every setting by dotted key, with its default as ``config show`` prints it."""
    flat: dict[str, Any] = {}
    for key, value in masked(Config()).items():
        if isinstance(value, dict):  # a [section]
            flat.update({f"{key}.{inner}": shown for inner, shown in value.items()})
        else:
            flat[key] = value
    return flat


def documented_settings() -> dict[str, tuple[str, str]]:
    """docs/operations.md's configuration table: key → (default, environment variable)."""
    rows = {}
    for line in OPERATIONS.read_text(encoding="utf-8").splitlines():
        if m := _CONFIG_ROW.match(line):
            assert m[1] not in rows, f"{m[1]} is listed twice"
            rows[m[1]] = (m[2], m[3])
    return rows


def env_text(value: Any) -> str:
    """A default as an environment variable writes it."""
    if value is None:  # a key unset by default (cpu_affinity): an empty variable
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):  # auth.api_keys: "name:role:key,..."; none by default
        return ""
    return str(value)


def test_operations_lists_every_configuration_key_and_nothing_else():
    assert set(documented_settings()) == set(code_defaults())


def test_operations_gives_each_key_the_default_config_show_prints():
    documented = documented_settings()
    wrong = {key: (documented[key][0], json.dumps(default))
             for key, default in code_defaults().items()
             if key in documented and documented[key][0] != json.dumps(default)}
    assert wrong == {}


def test_operations_names_each_key_by_its_environment_variable():
    documented = documented_settings()
    wrong = {key: env for key, (_, env) in documented.items()
             if env != ENV_PREFIX + key.replace(".", "_").upper()}
    assert wrong == {}


def test_documented_variables_with_documented_defaults_load_the_default_configuration():
    # An unknown variable or a default that does not parse would stop the start (ConfigError).
    defaults = code_defaults()
    environ = {env: env_text(defaults[key]) for key, (_, env) in documented_settings().items()}
    assert load_config(None, environ=environ) == Config()


# --- (b) alerts and the runbook -------------------------------------------------------------


def alert_rules(path: Path) -> list[dict]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"] if "alert" in rule]


def test_alert_rules_file_defines_alerts():
    assert alert_rules(ALERTS), f"no alert in {ALERTS.relative_to(ROOT)}"


def test_every_alert_has_a_runbook_section_headed_by_its_name():
    sections = set(headings(RUNBOOK.read_text(encoding="utf-8")))
    missing = [rule["alert"] for rule in alert_rules(ALERTS) if rule["alert"] not in sections]
    assert missing == []


def test_every_alert_runbook_url_lands_on_its_section():
    sections = anchors(RUNBOOK)
    wrong = {}
    for rule in alert_rules(ALERTS):
        url = rule.get("annotations", {}).get("runbook_url", "")
        target = url.rpartition("#")[2]
        if target != rule["alert"].lower() or target not in sections:
            wrong[rule["alert"]] = url
    assert wrong == {}


# --- (c) no references outside the repository -----------------------------------------------


@pytest.mark.parametrize("path", [*doc_files(), README], ids=lambda p: p.name)
def test_documentation_does_not_refer_to_a_specification_outside_the_repository(path):
    text = path.read_text(encoding="utf-8")
    assert [word for word in FOREIGN_REFERENCES if word in text] == []


# The same references anywhere in the tree: code, tests, benches, ops files. The patterns are
# built so that this file does not match itself.
_CITATION = re.compile("|".join((
    r"SPEC(?:\.md|\s?\u00a7)",  # the team's specification
    r"\u00a7\s?\d",  # a section by number: the two design documents' (M, N) or a bare one
    r"\b[Ii]ssue [0-9]+\b",  # the team's issue tracker, by number
    r"\bSTY" + r"LE(?:\.md)?\b",  # the team's style notes
    r"/work/" + "shared",
)))
# The design documents were written in Chinese; product code and docs quote none of it (test
# data in a few tests is Chinese on purpose).
_CJK = re.compile("[\u4e00-\u9fff]")
_TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json", ".toml", ".cfg", ".txt", ".sh", ""}


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    return [ROOT / name for name in listed
            if (ROOT / name).suffix in _TEXT_SUFFIXES and not name.startswith(".notes/")
            and (ROOT / name).is_file()]


def test_nothing_in_the_tree_cites_a_document_outside_the_repository():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}"
             for path in tracked_text_files()
             for number, line in enumerate(path.read_text(encoding="utf-8",
                                                           errors="replace").splitlines(), 1)
             if _CITATION.search(line)]
    assert found == []


def test_product_code_and_docs_quote_no_chinese_design_text():
    found = [f"{path.relative_to(ROOT)}:{number}"
             for path in tracked_text_files()
             if path.relative_to(ROOT).parts[0] in ("ticket_dispatcher", "docs", "README.md",
                                                    "bench", "ops")
             for number, line in enumerate(path.read_text(encoding="utf-8",
                                                           errors="replace").splitlines(), 1)
             if _CJK.search(line)]
    assert found == []


def test_the_citation_pattern_finds_each_kind_of_reference():
    # Assembled here, so that this file does not cite anything itself.
    for cited in ("see SPEC \u00a79", "(N\u00a76.4)", "M\u00a78.1 says", "never (\u00a78.3)",
                  "iss" + "ue 7, part 3", "iss" + "ue 1234", "as " + "STY" + "LE.md says"):
        assert _CITATION.search(cited), cited
    for plain in ("the Jira iss" + "ue TCID-404", "tiss" + "ue 12", "iss" + "ues of 2026"):
        assert not _CITATION.search(plain), plain


def test_the_three_guides_exist_and_the_readme_links_them():
    readme_links = set(links(README.read_text(encoding="utf-8")))
    for name in ("policies.md", "operations.md", "runbook.md"):
        assert (DOCS / name).is_file()
        assert f"docs/{name}" in readme_links


# --- (d) relative links ---------------------------------------------------------------------


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in links(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(target)
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(target)
    return broken


@pytest.mark.parametrize("path", [*doc_files(), README], ids=lambda p: p.name)
def test_relative_links_point_to_files_and_headings_that_exist(path):
    assert broken_links(path) == []


def test_a_link_to_a_missing_file_or_heading_is_reported(tmp_path):
    (tmp_path / "other.md").write_text("# Present\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("[a](other.md#present) [b](other.md#absent) [c](gone.md) "
                    "[d](https://example.com/x.md) [e](#top)\n# Top\n", encoding="utf-8")
    assert broken_links(page) == ["other.md#absent", "gone.md"]
