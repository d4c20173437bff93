"""``docs/results.md``: generated from the committed ledgers, which recompute from the committed raw artifacts.

The page cannot drift from the data: it must be byte for byte what its ledgers render to, it must
name those ledgers' sha256, and each ledger must recompute from the raw artifacts kept beside it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from creditaudit.errors import CheckFailed, InputError
from creditaudit.ledger.model import Ledger, read_ledger
from creditaudit.ledger.results import LedgerSource, relation, render_results, results_command, write_results
from creditaudit.protocol.canonical import sha256_file

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results.md"


def _page_ledgers() -> dict[str, tuple[str, str]]:
    """``{role: (path, sha256)}`` from the page's ledger table."""
    rows = re.findall(r"^\| `([^`]+)` \(the (audit|training arms)\) \| `([0-9a-f]{64})` \|", PAGE.read_text("utf-8"),
                      flags=re.M)
    return {role: (path, sha) for path, role, sha in rows}


@pytest.fixture(scope="module")
def page_ledgers():
    ledgers = _page_ledgers()
    assert "audit" in ledgers, "docs/results.md names no audit ledger"
    return ledgers


def test_relation_compares_an_interval_with_a_number_a_range_or_an_estimate_and_interval():
    assert relation(0.1, 0.2, 0.15) == "overlaps"
    assert relation(0.1, 0.2, 0.2) == "overlaps"  # closed intervals
    assert relation(0.21, 0.3, 0.2) == "above"
    assert relation(-0.3, -0.21, -0.2) == "below"
    assert relation(0.5, 0.5, [0.4, 0.6]) == "overlaps"  # a point inside a range over settings
    assert relation(0.7, 0.7, [0.6, 0.4]) == "above"  # a range in either order
    assert relation(-0.05, 0.02, [0.114, 0.027, 0.168]) == "below"  # [estimate, low, high]: the interval counts
    assert relation(0.02, 0.03, [0.114, 0.027, 0.168]) == "overlaps"
    assert relation(None, None, 0.1) == "undefined"
    with pytest.raises(ValueError):
        relation(0.1, 0.2, [1, 2, 3, 4])


def test_the_committed_page_is_what_its_ledgers_render_to(page_ledgers, monkeypatch):
    monkeypatch.chdir(ROOT)  # the page names its ledgers relative to the repository root
    for role, (path, sha) in page_ledgers.items():
        assert (ROOT / path).is_file(), f"docs/results.md names {path}, which is not committed"
        assert sha256_file(ROOT / path) == sha, f"{path} is not the ledger docs/results.md was generated from"
    audit = LedgerSource.read(page_ledgers["audit"][0])
    arms = LedgerSource.read(page_ledgers["training arms"][0]) if "training arms" in page_ledgers else None
    command = results_command(audit.label, "docs/results.md", arms.label if arms else None)
    assert f"    {command}\n" in PAGE.read_text("utf-8"), "the page's regeneration command is not the one that made it"
    rendered = render_results(audit, arms, command=command)
    assert rendered == PAGE.read_text("utf-8"), (
        "docs/results.md is not what its ledgers render to; regenerate it with the command at its top")


@pytest.mark.slow
def test_each_committed_ledger_recomputes_from_the_raw_artifacts_kept_beside_it(page_ledgers):
    """The kept directory is a run without keys, links or policy: every artifact of the ledger's
    manifest is there with its recorded hash, and the producers recompute every entry from them."""
    from creditaudit.ledger.build import compare_ledgers, compute_ledger
    from creditaudit.ledger.model import parse_ledger

    for path, _ in page_ledgers.values():
        stored = read_ledger(ROOT / path)
        kept = (ROOT / path).parent.parent
        for record in stored.artifacts:
            assert sha256_file(kept / record.path) == record.sha256, f"{kept / record.path} is not the ledger's input"
        recomputed = parse_ledger(compute_ledger(kept), source="recomputed")
        differences = compare_ledgers(stored, recomputed)
        assert not differences, "\n".join(d.render() for d in differences[:5])
        assert [a.sha256 for a in recomputed.artifacts] == [a.sha256 for a in stored.artifacts]


def _with(ledger: Ledger, **values) -> Ledger:
    """A copy of ``ledger`` with some entries' value (and text) replaced."""
    entries = []
    for e in ledger.entries:
        if e.name in values:
            value = values[e.name]
            e = e.model_copy(update={"value": value, "text": f"{value:+.3f}"})
        entries.append(e)
    return ledger.model_copy(update={"entries": entries})


def _source(ledger: Ledger) -> LedgerSource:
    return LedgerSource(ledger, "ledger.json", "0" * 64)


def _judge_row(text: str) -> str:
    """The judge's row of the verdict table."""
    return [line for line in text.splitlines() if line.startswith("| judge | H")][0]


def test_the_words_follow_the_numbers(page_ledgers):
    """Whether the page calls a figure consistent with the paper's, above or below it, is decided
    by the ledger's numbers: moving the judge's interval moves the words."""
    from creditaudit.papers import paper_value

    ledger = read_ledger(ROOT / page_ledgers["audit"][0])
    _, low, high = paper_value("paper.audit_rho.judge").value
    above = _with(ledger, **{"audit.judge.ci_low": high + 0.01, "audit.judge.ci_high": high + 0.1})
    inside = _with(ledger, **{"audit.judge.ci_low": low - 0.01, "audit.judge.ci_high": low + 0.01})
    below = _with(ledger, **{"audit.judge.ci_low": low - 0.2, "audit.judge.ci_high": low - 0.01})
    for changed, words in ((above, "above the paper's"), (inside, "consistent with the paper's"),
                           (below, "below the paper's")):
        text = render_results(_source(changed), command="creditaudit results ledger.json --out results.md")
        assert _judge_row(text).endswith(f"| {words} |"), _judge_row(text)
        assert re.search(rf"\*\*The judge\.\*\* Ours is [^\n]*\n  {words} ", text)


def test_a_ledger_without_an_entry_the_page_needs_is_named(page_ledgers):
    ledger = read_ledger(ROOT / page_ledgers["audit"][0])
    without = ledger.model_copy(update={"entries": [e for e in ledger.entries if e.name != "router.reading"]})
    with pytest.raises(CheckFailed, match=r"router\.reading.*regenerate that ledger"):
        render_results(_source(without), command="c")


def test_the_cli_writes_the_page_and_refuses_a_ledger_of_the_wrong_kind(page_ledgers, tmp_path, monkeypatch, capsys):
    from creditaudit.cli import main

    monkeypatch.chdir(ROOT)
    audit = page_ledgers["audit"][0]
    out = tmp_path / "results.md"
    with pytest.raises(SystemExit) as exc:
        main(["results", audit, "--out", str(out)])
    assert exc.value.code == 0
    text = out.read_text("utf-8")
    assert f"creditaudit results {audit} --out results.md" in text  # an absolute path outside the tree: its name only
    assert str(tmp_path) not in text
    assert sha256_file(ROOT / audit) in text

    with pytest.raises(SystemExit) as exc:
        main(["results", audit, "--arms", audit, "--out", str(tmp_path / "x.md")])
    assert exc.value.code == 2 and "no training-arms entries" in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()
    with pytest.raises(InputError, match="no ledger"):
        write_results(tmp_path / "missing.json", tmp_path / "y.md")
