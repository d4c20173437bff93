"""``creditaudit calibrate``: the default decision order recovers the planted answers, and a
decision order with a gate removed is caught (exit 1)."""

from __future__ import annotations

import json

import pytest

from creditaudit.cli import main
from creditaudit.protocol.io import default_template_text


def _cli(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_the_default_template_recovers_every_planted_answer(capsys):
    code, out, _ = _cli(["calibrate", "--json"], capsys)
    assert code == 0, out
    result = json.loads(out)
    verdicts = {row["subject"]: row["verdict"] for row in result["rows"]}
    assert verdicts == {"oracle": "H1_TRACKS", "negated": "H2_REVERSED", "noise": "H3_PLACEBO",
                        "shuffle-oracle": "H3_PLACEBO", "Controls gate": "passes"}
    assert result["recovered"] == result["of"] == 5 and result["n_trajectories"] == 90
    oracle = next(r for r in result["rows"] if r["subject"] == "oracle")
    assert oracle["ci_low"] > 0.3  # the planted effects are tracked, not merely signed


@pytest.mark.parametrize("removed, missed", [("H2", "negated"), ("H1", "oracle"), ("H3", "noise")])
def test_a_decision_order_without_a_gate_fails_calibration(tmp_path, capsys, removed, missed):
    import yaml

    data = yaml.safe_load(default_template_text())
    hypotheses = data["hypotheses"]
    hypotheses["gates"] = [g for g in hypotheses["gates"] if g["id"] != removed]
    hypotheses["decision_order"] = [g for g in hypotheses["decision_order"] if g != removed]
    path = tmp_path / "protocol.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), "utf-8")
    code, out, err = _cli(["calibrate", "--protocol", str(path)], capsys)
    assert code == 1, out + err
    line = next(line for line in out.splitlines() if line.startswith(missed + " "))
    assert line.endswith("MISSED") and "recovers planted answers: 5/5" not in out
    assert "does not recover the planted answers" in err


def test_bad_usage_is_exit_2(tmp_path, capsys):
    code, _, err = _cli(["calibrate", "--run", str(tmp_path)], capsys)
    assert code == 2 and "no protocol in the run directory" in err
    code, _, _ = _cli(["calibrate", "--tasks", "3"], capsys)
    assert code == 2
