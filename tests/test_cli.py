"""The command line: --help everywhere, exit codes 0 / 1 / 2, stubs that do not pretend."""

import subprocess
import sys

import pytest

from creditaudit.cli import app, main

STAGES = ["collect", "replay", "signals", "audit", "arms", "report"]


def run(args, capsys=None):
    with pytest.raises(SystemExit) as info:
        main(args)
    return info.value.code


def test_help_everywhere(capsys):
    assert run(["--help"]) == 0
    commands = [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]
    for name in commands:
        assert run([name, "--help"]) == 0, name
    for sub in ["init", "keygen", "id", "freeze", "verify", "amend"]:
        assert run(["protocol", sub, "--help"]) == 0, sub
    assert "freeze" in capsys.readouterr().out


@pytest.mark.parametrize("stage", STAGES)
def test_stages_refuse_a_missing_run_directory(stage, tmp_path, capsys):
    assert run([stage, "--run", str(tmp_path / "no-such-run")]) == 2
    assert "no-such-run" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys):
    assert run(["protocol", "verify"]) == 2  # missing argument
    assert run(["protocol", "freeze", "x.yaml", "--no-such-option"]) == 2
    assert run(["no-such-command"]) == 2


def test_protocol_round_trip_exit_codes(tmp_path, fake_policy_dir, capsys):
    proto = tmp_path / "protocol.yaml"
    assert run(["protocol", "init", str(proto), "--policy", str(fake_policy_dir)]) == 0
    assert run(["protocol", "init", str(proto)]) == 2  # never overwrites
    assert run(["protocol", "verify", str(proto)]) == 2  # no lock yet
    assert run(["protocol", "keygen", "--out", str(tmp_path / "keys")]) == 0
    assert run(["protocol", "keygen", "--out", str(tmp_path / "keys")]) == 2  # never overwrites keys
    assert run(["protocol", "freeze", str(proto)]) == 0
    assert run(["protocol", "freeze", str(proto)]) == 2  # never overwrites the lock
    assert run(["protocol", "verify", str(proto), "--pubkey", str(tmp_path / "keys" / "creditaudit.pub")]) == 0
    capsys.readouterr()
    proto.write_text(proto.read_text().replace("bootstrap_iterations: 10000", "bootstrap_iterations: 9999"))
    assert run(["protocol", "verify", str(proto)]) == 1
    assert "statistics.bootstrap_iterations: 10000 -> 9999" in capsys.readouterr().err
    proto.write_text(proto.read_text() + "\n  : [broken\n")
    assert run(["protocol", "verify", str(proto)]) == 2
    assert "malformed YAML" in capsys.readouterr().err


def test_installed_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "creditaudit", "arms", "--run", "no-such-run"], capture_output=True,
                            text=True)
    assert result.returncode == 2 and "no protocol in the run directory" in result.stderr
    result = subprocess.run([sys.executable, "-m", "creditaudit", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("creditaudit ")
