"""Open registries: plugins found through real installed distributions (a ``dist-info`` with
``entry_points.txt`` on ``sys.path``), never by patching the registry; pins and their checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from creditaudit import plugins
from creditaudit.errors import CheckFailed, InputError

FAMILY_SOURCE = '''
"""A third party's credit family: minus the action's length, times a scale."""
from typing import Annotated

from pydantic import Field

from creditaudit.signals.base import FamilyBase, FamilyOutput, credit_frame


class LengthFamily(FamilyBase):
    def __init__(self, *, name, scale):
        self.name, self.scale = name, scale

    def compute(self, context):
        values = {(t.trajectory_id, r.turn): -self.scale * len(r.action)
                  for t in context.trajectories for r in t.turns}
        return FamilyOutput(credit_frame(context.trajectories, values))


def length_family(*, name: str, scale: Annotated[float, Field(gt=0)] = 1.0) -> LengthFamily:
    return LengthFamily(name=name, scale=scale)
'''


def write_distribution(root: Path, name: str, version: str, modules: dict[str, str],
                       entry_points: dict[str, dict[str, str]]) -> Path:
    """A minimal installed distribution under ``root`` (what ``pip install --target root`` leaves):
    its modules and a ``<name>-<version>.dist-info`` with METADATA and entry_points.txt."""
    for module, source in modules.items():
        path = root / (module.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, "utf-8")
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", "utf-8")
    lines = []
    for group, points in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in points.items()]
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines), "utf-8")
    (info / "RECORD").write_text("", "utf-8")
    return info


@pytest.fixture()
def third_party(tmp_path, monkeypatch):
    """A throwaway distribution ``tp-credit`` publishing the family ``tp_length``, on ``sys.path``."""
    site = tmp_path / "site"
    info = write_distribution(site, "tp-credit", "0.3.1", {"tp_credit.__init__": FAMILY_SOURCE},
                              {"creditaudit.families": {"tp_length": "tp_credit:length_family"}})
    monkeypatch.syspath_prepend(str(site))
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site)] + ([old] if old else [])))  # subprocesses too
    plugins.reload()
    yield site, info
    for name in [m for m in sys.modules if m == "tp_credit" or m.startswith("tp_credit.")]:
        del sys.modules[name]
    plugins.reload()  # rediscovered lazily, after monkeypatch restores sys.path


def _controls(signals):
    from helpers import CONTROLS

    return CONTROLS[:2] + [{"name": f"shuffle-{s['name']}", "kind": "shuffle", "of": s["name"]} for s in signals]


def test_builtins_are_published_through_the_same_entry_point_groups():
    assert {"implicit", "judge", "confidence", "prover", "vict", "grpo", "rloo"} <= set(plugins.names("family"))
    assert set(plugins.names("proposer")) >= {"judge", "random", "oracle"}
    assert all(plugins.get("family", n).distribution == "creditaudit" for n in ("implicit", "vict"))


def test_a_factory_signature_is_the_statement_of_its_arguments():
    implicit = plugins.get("family", "implicit")
    assert implicit.bind({}) == {"temperature": 5.0, "history_length": 2, "clip_low": 0.8, "clip_high": 1.2,
                                 "gamma": 0.95, "smoothing_alpha": 0.5, "omega": 1.0, "do_no_harm": True}
    assert implicit.bind({"temperature": 3})["temperature"] == 3.0  # an int where a float is expected
    with pytest.raises(ValueError, match=r"`temperature`: Input should be a valid number"):
        implicit.bind({"temperature": "hot"})
    with pytest.raises(ValueError, match="unknown family 'hcapo'; installed: "):
        plugins.get("family", "hcapo")


def test_an_argument_added_later_enters_the_frozen_args_only_when_set():
    """ProVer's ``compare`` came after protocols were frozen with ProVer: at its default it is left out
    of the bound args (so of the protocol id), set it is kept; the object gets it either way."""
    prover = plugins.get("family", "prover")
    assert "compare" in prover.parameters() and "compare" not in prover.bind({})
    assert prover.bind({"compare": ["oracle"]})["compare"] == ["oracle"]
    assert prover.create(prover.bind({}), name="p").compare == ()
    assert prover.create(prover.bind({"compare": ["oracle", "judge"]}), name="p").compare == ("oracle",)
    with pytest.raises(InputError, match=r"`compare`: unknown proposer 'best'"):
        prover.create({"compare": ["best"]}, name="p")


def test_a_third_party_family_is_found_and_audited_from_a_protocol(tmp_path, third_party, planted_policy_dir):
    from helpers import SIGNALS, make_run

    from creditaudit.protocol.lock import require_frozen
    from creditaudit.replay.collect import read_trajectories
    from creditaudit.signals import read_credit, run_signals

    plugin = plugins.get("family", "tp_length")
    assert (plugin.distribution, plugin.version) == ("tp-credit", "0.3.1")
    signals = SIGNALS[:1] + [{"name": "confidence", "family": "confidence"},
                             {"name": "judge", "family": "judge", "args": {"backend": "local", "model": "policy"}},
                             {"name": "length", "family": "tp_length", "args": {"scale": 2}}]
    run, signer = make_run(tmp_path, planted_policy_dir, signals=signals, controls=_controls(signals))
    frozen = require_frozen(run / "protocol.yaml")
    pin = next(p for p in frozen.protocol.plugins if p.name == "tp_length")
    assert (pin.kind, pin.distribution, pin.version) == ("family", "tp-credit", "0.3.1")
    assert frozen.protocol.signals[3].args == {"scale": 2.0}
    run_signals(run / "protocol.yaml", signer)
    credit = read_credit(frozen).to_pandas()
    actions = read_trajectories(frozen).to_pandas().set_index(["trajectory_id", "turn"])["action"]
    rows = credit[credit.subject == "length"].set_index(["trajectory_id", "turn"])
    assert len(rows) == len(actions)
    for key, value in rows["credit"].items():
        assert value == -2.0 * len(actions[key])


def test_a_changed_or_missing_plugin_stops_every_stage_naming_it(tmp_path, third_party, planted_policy_dir):
    from helpers import SIGNALS, make_run

    from creditaudit.protocol.lock import require_frozen, verify

    site, info = third_party
    signals = SIGNALS[:1] + [{"name": "confidence", "family": "confidence"},
                             {"name": "judge", "family": "judge", "args": {"backend": "local", "model": "policy"}},
                             {"name": "length", "family": "tp_length"}]
    run, _ = make_run(tmp_path, planted_policy_dir, signals=signals, controls=_controls(signals), collect_now=False)
    assert verify(run / "protocol.yaml").ok
    module = site / "tp_credit" / "__init__.py"
    module.write_text(module.read_text("utf-8").replace("-self.scale", "self.scale"), "utf-8")
    report = verify(run / "protocol.yaml")
    assert not report.ok and "family plugin 'tp_length' (tp-credit 0.3.1)" in report.render()
    assert "source (tp_credit) changed after the protocol was pinned" in report.render()
    with pytest.raises(CheckFailed, match="tp_length"):
        require_frozen(run / "protocol.yaml")
    # through the command line, as a user runs it: exit 1 naming the plugin
    result = subprocess.run([sys.executable, "-m", "creditaudit", "protocol", "verify", str(run / "protocol.yaml")],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "tp_length" in result.stderr
    # uninstalled: still a failed check (exit 1) that names the plugin and what to install
    import shutil

    shutil.rmtree(info)
    plugins.reload()
    with pytest.raises(CheckFailed, match=r"family plugin 'tp_length' \(tp-credit 0.3.1\) is pinned but not installed"):
        require_frozen(run / "protocol.yaml")


def test_an_unpinned_third_party_plugin_cannot_be_frozen(tmp_path, third_party, planted_policy_dir):
    import yaml

    from helpers import CONTROLS, SIGNALS

    from creditaudit.cli.protocol import pin_policy_text
    from creditaudit.protocol.io import default_template_text
    from creditaudit.protocol.lock import freeze
    from creditaudit.protocol.signing import generate_keypair, load_signer

    data = yaml.safe_load(default_template_text())
    data["signals"] = SIGNALS + [{"name": "length", "family": "tp_length"}]
    data["controls"] = CONTROLS + [{"name": "shuffle-length", "kind": "shuffle", "of": "length"}]
    path = tmp_path / "protocol.yaml"
    path.write_text(pin_policy_text(yaml.safe_dump(data, sort_keys=False), planted_policy_dir))
    signer = load_signer(generate_keypair(tmp_path / "keys")[0])
    with pytest.raises(InputError, match=r"third-party plugin\(s\) family 'tp_length' \(tp-credit\) are not pinned"):
        freeze(path, signer, check_inputs=False)
    assert not (tmp_path / "protocol.lock.json").exists()


BROKEN_ENV_SOURCE = '''
def broken_environment(horizon: int = 10, mode: str = "value"):
    if mode == "value":
        raise ValueError("mode 'value' is not supported; choose 'ok'")
    raise TypeError("an internal mistake of the plugin")
'''


def test_a_factory_that_fails_exits_2_naming_the_plugin_not_a_traceback(tmp_path, monkeypatch, capsys):
    import yaml

    from creditaudit.cli import main
    from creditaudit.protocol.io import default_template_text

    site = tmp_path / "site"
    write_distribution(site, "tp-env", "0.2.0", {"tp_env": BROKEN_ENV_SOURCE},
                       {"creditaudit.environments": {"broken": "tp_env:broken_environment"}})
    monkeypatch.syspath_prepend(str(site))
    plugins.reload()
    try:
        with pytest.raises(InputError, match=r"^environment 'broken' \(tp-env 0\.2\.0\): mode 'value' is not "
                                             r"supported; choose 'ok'$"):
            plugins.get("environment", "broken").create({}, horizon=10)
        with pytest.raises(InputError, match=r"an internal mistake of the plugin \(TypeError raised by its factory "
                                             r"tp_env:broken_environment\)"):
            plugins.get("environment", "broken").create({"mode": "type"}, horizon=10)
        for mode in ("value", "type"):
            data = yaml.safe_load(default_template_text())
            data["environment"] = {"name": "broken", "horizon": 10, "args": {"mode": mode}}
            path = tmp_path / f"{mode}.yaml"
            path.write_text(yaml.safe_dump(data, sort_keys=False))
            with pytest.raises(SystemExit) as exc:
                main(["protocol", "id", str(path)])
            assert exc.value.code == 2
            err = capsys.readouterr().err
            assert "environment 'broken' (tp-env 0.2.0)" in err and "Traceback" not in err
    finally:
        sys.modules.pop("tp_env", None)
        plugins.reload()
