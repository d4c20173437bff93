"""Every command of the command line, with every wrong-kind and out-of-range input a user can type:
exit 2, one clear message (never a traceback), and the directory left exactly as it was.

The commands and their parameters are discovered from the application itself, so a new command or
option cannot escape: every path parameter must say below what kind of path it takes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer

from creditaudit.cli import app, main

#: What kind of path each path parameter takes: an existing directory / file it reads ("dir-in",
#: "file-in"), or a directory / file it writes ("dir-out", "file-out").
PATH_KINDS: dict[tuple[str, str], str] = {
    ("games", "run"): "dir-in",
    ("collect", "run"): "dir-in",
    ("replay", "run"): "dir-in",
    ("signals", "run"): "dir-in",
    ("audit", "run"): "dir-in",
    ("arms", "run"): "dir-in",
    ("export", "run"): "dir-in",
    ("export", "out"): "file-out",
    ("calibrate", "run"): "dir-in",
    ("calibrate", "protocol"): "file-in",
    ("report", "run"): "dir-in",
    ("report", "ledger"): "file-in",
    ("demo", "run"): "dir-out",
    ("protocol init", "path"): "file-out",
    ("protocol init", "policy"): "dir-in",
    ("protocol pin", "path"): "file-in",
    ("protocol pin", "policy"): "dir-in",
    ("protocol pin", "games"): "dir-in",
    ("protocol migrate", "old"): "file-in",
    ("protocol migrate", "new"): "file-out",
    ("protocol keygen", "out"): "dir-out",
    ("protocol id", "path"): "file-in",
    ("protocol freeze", "path"): "file-in",
    ("protocol freeze", "key"): "file-in",
    ("protocol freeze", "registry"): "file-out",
    ("protocol verify", "path"): "file-in",
    ("protocol verify", "registry"): "file-in",
    ("protocol verify", "pubkey"): "file-in",
    ("protocol amend", "parent"): "file-in",
    ("protocol amend", "child"): "file-in",
    ("protocol amend", "key"): "file-in",
    ("protocol amend", "registry"): "file-out",
    ("judge build", "out"): "dir-out",
    ("judge build", "games_dir"): "dir-out",
    ("policy build", "protocol"): "file-in",
    ("policy build", "out"): "dir-out",
    ("policy hashes", "path"): "dir-in",
    ("ledger regenerate", "run"): "dir-in",
    ("ledger regenerate", "ledger"): "file-out",
    ("ledger verify", "run"): "dir-in",
    ("ledger verify", "ledger"): "file-in",
    ("ledger check", "run"): "dir-in",
    ("ledger check", "ledger"): "file-in",
    ("ledger integrity", "run"): "dir-in",
    ("ledger integrity", "ledger"): "file-in",
    ("results", "ledger"): "file-in",
    ("results", "arms"): "file-in",
    ("results", "out"): "file-out",
}

#: Values of the other parameters while one is varied: paths inside the prepared directory (a
#: frozen run ``run`` with a stand-in policy, an unpinned protocol ``proto.yaml``).
BASE: dict[str, dict[str, str]] = {
    "replay": {"run": "run"},
    "export": {"run": "run", "out": "out.parquet"},
    "report": {"run": "run"},
    "protocol pin": {"path": "proto.yaml"},
    "judge build": {"out": "judge-out"},
    "protocol migrate": {"old": "proto.yaml", "new": "new.yaml"},
    "protocol id": {"path": "proto.yaml"},
    "protocol freeze": {"path": "run/protocol.yaml", "key": "run/keys/creditaudit.key"},
    "protocol verify": {"path": "run/protocol.yaml"},
    "protocol amend": {"parent": "run/protocol.yaml", "child": "proto.yaml", "reason": "typo",
                       "key": "run/keys/creditaudit.key"},
    "policy build": {"protocol": "proto.yaml"},
    "policy hashes": {"path": "run/policy"},
    "ledger regenerate": {"run": "run"},
    "ledger verify": {"run": "run"},
    "ledger check": {"run": "run"},
    "ledger integrity": {"run": "run"},
    "results": {"ledger": "run/protocol.yaml"},
}

#: Out-of-range or wrong-kind values of options that are not paths.
OTHER_VALUES: dict[tuple[str, str], list[str]] = {
    ("replay", "workers"): ["-2", "0", "two"],
    ("replay", "executor"): ["threads"],
    ("calibrate", "tasks"): ["-1", "19", "10001", "many"],
    ("judge build", "seed"): ["-1", "seed"],
    ("judge build", "threads"): ["0", "two"],
    ("judge build", "workers"): ["0", "two"],
}

FILE, DIR = "a-file", "a-dir"


def _commands() -> dict[str, object]:
    found: dict[str, object] = {}

    def walk(command, prefix):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*prefix, name])
        else:
            found[" ".join(prefix)] = command

    walk(typer.main.get_command(app), [])
    return found


def _annotation(param) -> object:
    return param.type_descriptor.annotation


def _argv(name: str, command, values: dict[str, str]) -> list[str]:
    argv = name.split()
    for param in command.params:
        if param.name in values:
            value = values[param.name]
            argv += [value] if param.param_type_name == "argument" else [param.opts[0], value]
    return argv


def _wrong_paths(kind: str) -> list[str]:
    under_a_file = f"{FILE}/x" + ("/y.yaml" if kind.startswith("file") else "")
    wrong = [under_a_file, FILE if kind.startswith("dir") else DIR]
    if kind.endswith("-in"):
        wrong.append("no-such-path")
    return wrong


def _cases() -> list[tuple[str, str, str]]:
    cases = []
    for name, command in sorted(_commands().items()):
        for param in command.params:
            if _annotation(param) is Path:
                kind = PATH_KINDS.get((name, param.name))
                assert kind is not None, f"`{name} {param.opts[0]}` takes a path: say in PATH_KINDS what kind"
                cases += [(name, param.name, value) for value in _wrong_paths(kind)]
            elif (name, param.name) in OTHER_VALUES:
                cases += [(name, param.name, value) for value in OTHER_VALUES[(name, param.name)]]
            elif _annotation(param) in (int, float):
                raise AssertionError(f"`{name} {param.opts[0]}` is numeric: give its out-of-range values in OTHER_VALUES")
    return cases


CASES = _cases()


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A directory with a frozen run (a stand-in policy: pins only hash bytes), an unpinned protocol,
    a regular file and an empty directory."""
    from creditaudit.cli.protocol import render_template
    from creditaudit.protocol.io import default_template_text
    from creditaudit.protocol.lock import freeze
    from creditaudit.protocol.signing import generate_keypair, load_signer

    root = tmp_path_factory.mktemp("cli-inputs")
    policy = root / "run" / "policy"
    policy.mkdir(parents=True)
    (policy / "config.json").write_text('{"model_type": "qwen2"}')
    (policy / "model.safetensors").write_bytes(b"\x01\x02weights")
    (policy / "tokenizer.json").write_text('{"model": {}}')
    (policy / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    (root / "run" / "protocol.yaml").write_text(render_template(policy, root / "run"))
    freeze(root / "run" / "protocol.yaml", load_signer(generate_keypair(root / "run" / "keys")[0]))
    (root / "proto.yaml").write_text(default_template_text())
    (root / FILE).write_text("not a directory\n")
    (root / DIR).mkdir()
    return root


def test_every_command_is_covered():
    covered = {name for name, _, _ in CASES}
    assert covered == set(_commands()), set(_commands()) - covered
    assert len(CASES) > 80


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("name", "param", "value"), CASES, ids=[f"{n} --{p}={v}" for n, p, v in CASES])
def test_wrong_input_is_exit_2_with_one_message(name, param, value, workdir, monkeypatch, capsys):
    command = _commands()[name]
    monkeypatch.chdir(workdir)
    before = _snapshot(workdir)
    argv = _argv(name, command, {**BASE.get(name, {}), param: value})
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    assert exc.value.code == 2, (argv, out, err)
    assert "Traceback" not in err and "Traceback" not in out
    messages = [line for line in err.splitlines() if line.lower().startswith("error")]
    assert len(messages) == 1, (argv, err)
    assert len(messages[0]) > len("error: ") + 10, (argv, err)
    if value not in ("two", "many", "threads") and not value.lstrip("-").isdigit():
        assert value.split("/")[0] in messages[0], (argv, err)  # the message names the path
    assert _snapshot(workdir) == before, argv
    assert os.getcwd() == str(workdir)


def test_an_unchecked_path_error_is_still_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """The last line of defence: an ``OSError`` about a path that no command checked first."""
    import creditaudit.cli.protocol as protocol_cli

    def broken(directory):
        raise NotADirectoryError(20, "Not a directory", str(directory / "creditaudit.key"))

    monkeypatch.setattr(protocol_cli, "generate_keypair", broken)
    with pytest.raises(SystemExit) as exc:
        main(["protocol", "keygen", "--out", str(tmp_path / "keys")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err
    expected = f"error: {tmp_path / 'keys' / 'creditaudit.key'}: Not a directory (check the paths given on the command line)"
    assert err.strip().splitlines() == [expected]
