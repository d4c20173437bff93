"""The example plugin distribution (``examples/creditaudit-example-family``) and the family contract's version.

End to end: the example is installed as a real distribution (``pip install --target``, leaving a
``dist-info`` with its entry points), and a fresh process with that directory on ``PYTHONPATH``
discovers the family ``novelty`` from it -- no registry is patched -- and takes a protocol naming it
through ``protocol pin``, ``freeze``, ``collect``, ``replay``, ``signals`` and ``audit`` on the
planted environment. Uninstalling the distribution or editing its source after the freeze then stops
the signals stage with exit 1 naming the plugin.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from example_dists import ROOT, creditaudit, install, run_stages

from creditaudit.errors import InputError
from creditaudit.signals.base import FAMILY_CONTRACT_VERSION, FamilyBase, check_contract, family_traits

EXAMPLE = ROOT / "examples" / "creditaudit-example-family"
MODULE = Path("creditaudit_example_family") / "novelty.py"


# ----------------------------------------------------------------------------- the contract's version


class _Versioned(FamilyBase):
    def __init__(self, version):
        self.name, self.contract_version = "mine", version

    def compute(self, context):  # pragma: no cover - never called
        raise AssertionError


def test_a_family_written_for_another_contract_version_is_refused_naming_it():
    check_contract(_Versioned(FAMILY_CONTRACT_VERSION), source="x")
    check_contract(_Versioned(None), source="x")  # undeclared: the current contract
    with pytest.raises(InputError, match=rf"family 'mine' \(dist 1\.0\): written for family contract version "
                                         rf"{FAMILY_CONTRACT_VERSION + 1}, but creditaudit .* implements version "
                                         rf"{FAMILY_CONTRACT_VERSION}"):
        family_traits(_Versioned(FAMILY_CONTRACT_VERSION + 1), source="family 'mine' (dist 1.0)")
    with pytest.raises(InputError, match="`contract_version` must be an integer"):
        check_contract(_Versioned("1"), source="x")


def test_the_example_family_credits_new_places_and_penalises_returns():
    sys.path.insert(0, str(EXAMPLE))
    try:
        from creditaudit_example_family.novelty import novelty_credit, novelty_family
    finally:
        sys.path.remove(str(EXAMPLE))
    assert novelty_credit("room A", ["room B", "room  A", "room C", "room C", "room B"], revisit_penalty=0.25) == \
        [1.0, -0.25, 1.0, -0.25, -0.25]
    family = novelty_family(name="novelty", revisit_penalty=2.0)
    assert (family.neutral, family.needs, family.contract_version) == (0.0, frozenset(), FAMILY_CONTRACT_VERSION)
    family_traits(family, source="novelty")


# ----------------------------------------------------------------------------- end to end

def _protocol(policy_dir: Path, *, n_tasks: int, group: int, penalty: float) -> str:
    from creditaudit.protocol.io import default_template_text

    data = yaml.safe_load(default_template_text())
    data["environment"] = {"name": "planted", "source": "generated", "horizon": 8, "args": {"n_steps": 4}}
    data["collection"] = {"n_tasks": n_tasks, "group_size": group, "determinism_instances": 2}
    # free decoding: the tiny policy also writes doors that do not exist ("Nothing happens."), so its
    # trajectories revisit texts and the novelty credit is not constant
    data["policy"].update(source="local", path="policy", history_length=0, max_action_tokens=6, decoding="free",
                          temperature=1.0)
    data["signals"] = [{"name": "novelty", "family": "novelty", "args": {"revisit_penalty": penalty}}]
    data["controls"] = [{"name": "random", "kind": "random", "null_control": True},
                        {"name": "uniform", "kind": "uniform", "null_control": True},
                        {"name": "shuffle-novelty", "kind": "shuffle", "of": "novelty"}]
    data["router"] = None
    data["replay"]["n_alternatives"] = 2  # a smaller replay: this test is about the plugin, not the estimator
    data["statistics"]["bootstrap_iterations"] = 500
    return yaml.safe_dump(data, sort_keys=False)


@pytest.mark.slow
def test_the_installed_example_is_audited_end_to_end_and_pinned(tmp_path, planted_policy_dir):
    site = tmp_path / "site"
    install(EXAMPLE, site)
    info = next(site.glob("creditaudit_example_family-*.dist-info"))
    assert "novelty = creditaudit_example_family.novelty:novelty_family" in (info / "entry_points.txt").read_text()

    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(planted_policy_dir, run / "policy")
    (run / "protocol.yaml").write_text(_protocol(planted_policy_dir, n_tasks=5, group=2, penalty=0.5))
    outcome, stderr = run_stages(site, run, ("family", "novelty"))
    assert outcome["codes"] == [0] * 7, (outcome, stderr[-3000:])
    # discovered from the installed dist-info, not from the source tree
    assert (outcome["distribution"], outcome["version"]) == ("creditaudit-example-family", "0.1.0")

    # the protocol pins it: distribution, version and the hash of the installed module's source
    from creditaudit.protocol.canonical import sha256_file

    lock = json.loads(next(run.glob("protocol.lock.json")).read_text())
    (pin,) = [p for p in lock["protocol"]["plugins"] if p["name"] == "novelty"]
    assert pin == {"kind": "family", "name": "novelty", "distribution": "creditaudit-example-family",
                   "version": "0.1.0", "source_sha256": sha256_file(site / MODULE)}
    assert [s["args"] for s in lock["protocol"]["signals"]] == [{"revisit_penalty": 0.5}]

    # its credit is the example's rule on every collected turn, and the audit gives it a verdict
    import pandas as pd

    turns = pd.read_parquet(run / "collect" / "trajectories.parquet")
    credit = pd.read_parquet(run / "signals" / "credit.parquet")
    mine = credit[credit.subject == "novelty"].set_index(["trajectory_id", "turn"]).credit
    assert len(mine) == len(turns) and mine.notna().all()
    for tid, rows in turns.groupby("trajectory_id", sort=False):
        seen, expected = {" ".join(rows.observation.iloc[0].split())}, []
        for text in rows.feedback:
            key = " ".join(text.split())
            expected.append(-0.5 if key in seen else 1.0)
            seen.add(key)
        assert [mine[(tid, t)] for t in rows.turn] == expected, tid
    assert (mine == 1.0).any() and (mine == -0.5).any()  # both branches of the rule are exercised
    audit = json.loads((run / "audit" / "audit.json").read_text())
    (decision,) = [d for d in audit["decisions"] if d["family"] == "novelty"]
    assert decision["verdict"] in {"INSTRUMENT_INVALID", "INFEASIBLE", "H1_TRACKS", "H2_REVERSED", "H3_PLACEBO",
                                   "H4_WEAK"}, decision
    assert decision["decided_by"] and audit["sentences"]["novelty"].startswith("novelty: ")
    (subject,) = [s for s in audit["subjects"] if s["subject"] == "novelty"]
    assert subject["n_trajectories"] > 0 and subject["estimate"] is not None  # not constant: rank fidelity measured
    assert "- novelty: " in (run / "audit" / "summary.md").read_text()
    summary = json.loads((run / "signals" / "summary.json").read_text())
    assert summary["families"]["novelty"]["revisit_penalty"] == 0.5

    # (b) its installed source edited after the freeze: the signals stage stops, naming it
    module = site / MODULE
    original = module.read_text()
    module.write_text(original.replace("credit.append(-revisit_penalty if key in seen else 1.0)",
                                       "credit.append(1.0)"))
    result = creditaudit(site, "signals", "--run", str(run), "--quiet")
    assert result.returncode == 1, result.stderr
    assert "family plugin 'novelty' (creditaudit-example-family 0.1.0)" in result.stderr
    assert "changed after the protocol was pinned" in result.stderr
    module.write_text(original)

    # (a) the distribution uninstalled: the signals stage stops, naming it and what to install
    shutil.rmtree(info)
    shutil.rmtree(site / "creditaudit_example_family")
    result = creditaudit(site, "signals", "--run", str(run), "--quiet")
    assert result.returncode == 1, result.stderr
    assert ("family plugin 'novelty' (creditaudit-example-family 0.1.0) is pinned but not installed; install "
            "creditaudit-example-family==0.1.0") in result.stderr


@pytest.mark.slow
def test_an_installed_plugin_written_for_another_contract_version_cannot_be_pinned(tmp_path, planted_policy_dir):
    source = tmp_path / "example"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    module = source / MODULE
    module.write_text(module.read_text().replace("contract_version = 1 ", f"contract_version = {FAMILY_CONTRACT_VERSION + 1} "))
    site = tmp_path / "site"
    install(source, site)
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(planted_policy_dir, run / "policy")
    (run / "protocol.yaml").write_text(_protocol(planted_policy_dir, n_tasks=2, group=2, penalty=1.0))
    result = creditaudit(site, "protocol", "pin", str(run / "protocol.yaml"))
    assert result.returncode == 2, result.stderr
    assert (f"family 'novelty' (creditaudit-example-family 0.1.0): written for family contract version "
            f"{FAMILY_CONTRACT_VERSION + 1}") in result.stderr
    assert "Traceback" not in result.stderr
