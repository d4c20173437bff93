"""The report: every number from the ledger by name, refusing ledgers it must not render."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest

from creditaudit.errors import CheckFailed, InputError
from creditaudit.ledger import LEDGER_JSON, read_ledger, render_markdown, write_report
from creditaudit.ledger.report import TEMPLATE_DIR, load_ledger_for_report

_HEX = re.compile(r"\b[0-9a-f]{16,64}\b")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?%?")


@pytest.fixture(scope="module")
def reported(ledgered_run, tmp_path_factory):
    import shutil

    src, _, _ = ledgered_run
    run = tmp_path_factory.mktemp("reported") / "run"
    shutil.copytree(src, run)
    return run, write_report(run)


def test_templates_type_no_number():
    """Templates refer to ledger entries by name; no digit is typed in them (the HTML shell's only
    digits are structural: the charset and the style sheet)."""
    for path in sorted(TEMPLATE_DIR.glob("*.md.jinja")):
        digits = [(n, line) for n, line in enumerate(path.read_text().splitlines(), 1) if re.search(r"\d", line)]
        assert not digits, f"{path.name} types a number: {digits}"
    shell = (TEMPLATE_DIR / "report.html.jinja").read_text()
    shell = re.sub(r"<style>.*?</style>", "", shell, flags=re.S).replace('charset="utf-8"', "")
    assert not re.search(r"\d", shell)


def test_report_is_written_with_figures_and_attested(reported):
    from creditaudit.ledger.chain import walk_chain
    from creditaudit.protocol.lock import require_frozen

    run, result = reported
    md = result.markdown.read_text()
    html = result.html.read_text()
    ledger = read_ledger(run / LEDGER_JSON)
    e = ledger.entry_map()
    assert e["protocol.id"].value in md and e["protocol.id"].value in html
    for family in e["protocol.families"].value:  # verdicts with their gate traces
        assert f"### {family}: {e['verdict.' + family].text}" in md
        assert e[f"verdict.{family}.sentence"].text in md
        for gate in e["protocol.decision_order"].value:
            assert e[f"verdict.{family}.gate.{gate}.inputs"].text.replace("|", "\\|") in md
    for gate in e["protocol.decision_order"].value:
        assert e[f"protocol.gate.{gate}.rule"].text in md
    assert "## Confidence router, published with its negative result" in md
    assert e["router.reading"].text in md and e["router.pivotal_recall"].text in md
    assert "## Deviations from the protocol" in md and "None: the run used the protocol as frozen" in md
    assert {p.name for p in result.figures} >= {"forest.png", "measurability.png", "router.png"}
    assert "](figures/forest.png)" in md
    assert html.count('src="data:image/png;base64,') == len(result.figures)  # figures embedded
    assert "<table>" in html and "<h1>" in html
    frozen = require_frozen(run / "protocol.yaml")
    chain = walk_chain(run, frozen)
    assert chain.ok and chain.records[-1].stage == "report"
    assert {"report/report.md", "report/report.html"} <= set(chain.attested)


def test_every_number_in_the_report_comes_from_the_ledger(reported):
    run, result = reported
    md = result.markdown.read_text()
    ledger = read_ledger(run / LEDGER_JSON)
    source = "\n".join(e.text for e in ledger.entries) + "\n" + ledger.code_version
    hexes = set(_HEX.findall(source)) | {a.sha256 for a in ledger.artifacts}
    assert set(_HEX.findall(md)) <= hexes
    allowed = set(_NUMBER.findall(_HEX.sub(" ", source)))
    report_numbers = set(_NUMBER.findall(_HEX.sub(" ", md).replace(ledger.code_version, " ")))
    assert report_numbers, "the report shows numbers"
    assert report_numbers <= allowed, sorted(report_numbers - allowed)
    assert result.n_references > 300


def test_the_report_takes_each_number_by_name(reported):
    run, _ = reported
    ledger = read_ledger(run / LEDGER_JSON)
    sentinel = {"measurability.share_pivotal": "SENTINEL-PIVOTAL", "router.pivotal_recall": "SENTINEL-RECALL",
                "verdict.implicit": "SENTINEL-VERDICT"}
    edited = ledger.model_copy(update={"entries": [
        e.model_copy(update={"text": sentinel[e.name]}) if e.name in sentinel else e for e in ledger.entries]})
    text, referenced = render_markdown(edited)
    for name, value in sentinel.items():
        assert value in text and name in referenced
    missing = ledger.model_copy(update={"entries": [e for e in ledger.entries if e.name != "router.reading"]})
    with pytest.raises(CheckFailed, match="refers to ledger entry 'router.reading', which the ledger lacks"):
        render_markdown(missing)


def test_the_report_is_deterministic(reported):
    run, result = reported
    first = (result.markdown.read_bytes(), result.html.read_bytes(), [p.read_bytes() for p in result.figures])
    again = write_report(run)
    assert (again.markdown.read_bytes(), again.html.read_bytes(), [p.read_bytes() for p in again.figures]) == first


def test_deviations_are_listed(reported):
    run, _ = reported
    ledger = read_ledger(run / LEDGER_JSON)
    change = {"path": "statistics.bootstrap_iterations", "old": 500, "new": 400}
    values = {"protocol.n_deviations": (1, "1"), "protocol.parent_id": ("b" * 64, "b" * 64),
              "protocol.amendment_reason": ("too slow", "too slow"),
              "protocol.deviation.0": (change, "statistics.bootstrap_iterations: 500 -> 400")}
    entries = [e.model_copy(update={"value": values[e.name][0], "text": values[e.name][1]}) if e.name in values else e
               for e in ledger.entries]
    template = next(e for e in ledger.entries if e.name == "protocol.n_deviations")
    entries.append(template.model_copy(update={"name": "protocol.deviation.0", "value": change,
                                               "text": values["protocol.deviation.0"][1]}))
    text, _ = render_markdown(ledger.model_copy(update={"entries": sorted(entries, key=lambda e: e.name)}))
    assert f"amendment of `{'b' * 64}` — reason: too slow" in text
    assert "- `statistics.bootstrap_iterations: 500 -> 400`" in text


# ------------------------------------------------------------------------------ bad ledgers


def _cli(args):
    from creditaudit.cli import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    return exc.value.code


def test_a_missing_ledger_is_bad_input(audited_run, copy_run, capsys):
    run = copy_run(audited_run[0])
    assert _cli(["report", "--run", str(run)]) == 2
    assert "no ledger; run `creditaudit ledger regenerate` first" in capsys.readouterr().err
    assert not (run / "report" / "report.md").exists()


def test_a_ledger_of_another_protocol_is_bad_input(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    data = json.loads((run / LEDGER_JSON).read_text())
    (run / "other.json").write_text(json.dumps({**data, "protocol_id": "c" * 64}))
    with pytest.raises(InputError, match="belongs to protocol cccccccccccccccc…"):
        load_ledger_for_report(run, ledger_path=run / "other.json")


def test_a_ledger_of_another_code_version_is_refused(ledgered_run, copy_run, capsys):
    run = copy_run(ledgered_run[0])
    data = json.loads((run / LEDGER_JSON).read_text())
    data["code_version"] = "0.0.1+0000000000000000"
    (run / "old.json").write_text(json.dumps(data))
    assert _cli(["report", "--run", str(run), "--ledger", str(run / "old.json")]) == 1
    assert "written by code version 0.0.1+0000000000000000" in capsys.readouterr().err


def test_a_stale_or_altered_ledger_is_refused(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    path = run / LEDGER_JSON
    original = path.read_bytes()
    path.write_bytes(original.replace(b'"text":"', b'"text": "', 1))  # same ledger, other bytes
    with pytest.raises(CheckFailed, match="not the ledger the ledger stage attested"):
        load_ledger_for_report(run)
    path.write_bytes(original)
    turns = run / "replay" / "turns.parquet"
    from creditaudit.artifacts import write_parquet_atomic

    write_parquet_atomic(pq.read_table(turns).slice(1), turns)
    with pytest.raises(CheckFailed, match=r"the ledger is stale .* replay/turns\.parquet"):
        write_report(run)
    assert not (run / "report" / "report.md").exists()
