"""``creditaudit protocol ...``: write, sign, freeze, verify and amend protocols."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import typer

from creditaudit.artifacts import write_bytes_atomic
from creditaudit.cli.paths import dir_to_write, existing_file, file_to_write
from creditaudit.errors import CheckFailed, InputError
from creditaudit.protocol.hub import is_hub_path
from creditaudit.protocol.inputs import policy_pins
from creditaudit.protocol.io import default_template_text, load_protocol, parse_protocol
from creditaudit.protocol.lock import amend, freeze, lock_path_for, verify
from creditaudit.protocol.signing import PRIVATE_KEY_NAME, generate_keypair, load_signer

__all__ = ["app", "render_template", "default_key_path"]

app = typer.Typer(
    help="Protocol: write the template, make keys, freeze (sign + register), verify, amend.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_PIN_LINES = ("  model_files: {}\n", "  tokenizer_files: {}\n", "  chat_template_sha256: null\n")


def _yaml_map(name: str, mapping: dict[str, str]) -> str:
    if not mapping:
        return f"  {name}: {{}}\n"
    body = "".join(f"    {json.dumps(k)}: {v}\n" for k, v in sorted(mapping.items()))
    return f"  {name}:\n{body}"


def render_template(policy: Path | None = None, protocol_dir: Path | None = None) -> str:
    """The commented default template, with the policy's pins filled in when ``policy`` is given."""
    text = default_template_text()
    if policy is None:
        return text
    text = pin_policy_text(text, policy)
    base = (protocol_dir or Path.cwd()).resolve()
    rel = Path(os.path.relpath(policy.resolve(), base)).as_posix()
    text, n = re.subn(r"(?m)^  path: policy(?= )", lambda _m: f"  path: {json.dumps(rel)}", text, count=1)
    if n != 1:  # pragma: no cover - the shipped template has the line
        raise AssertionError("the default template has no `  path: policy` line")
    parse_protocol(text, source="template")  # the rendered template must validate
    return text


def default_key_path(protocol_path: Path) -> Path:
    return protocol_path.parent / "keys" / PRIVATE_KEY_NAME


@app.command("init")
def init_command(
    path: Path = typer.Argument(Path("protocol.yaml"), help="Where to write the protocol (never overwritten)."),
    policy: Path | None = typer.Option(
        None, "--policy", help="Policy directory whose files are hashed and pinned into the protocol."
    ),
) -> None:
    """Write the fully commented default protocol template (the paper's constants and gates)."""
    file_to_write(path, "`protocol init PATH`")
    if path.exists():
        raise InputError(f"{path}: already exists; `protocol init` never overwrites (choose another path)")
    text = render_template(policy, path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")
    protocol = parse_protocol(text, source=str(path))
    typer.echo(f"wrote {path} (protocol id {protocol.id})")
    if not protocol.policy.model_files:
        typer.echo("note: no policy pinned yet; run `creditaudit policy build` and re-init with --policy before freezing")


def pin_policy_text(text: str, policy: Path) -> str:
    """``text`` (a protocol whose policy is not pinned yet) with the policy's hashes filled in."""
    missing = [line.strip() for line in _PIN_LINES if line not in text]
    if missing:
        raise InputError(
            f"the protocol's policy section is already pinned or was edited by hand (no placeholder line "
            f"{missing[0]!r}); pinning rewrites only an unpinned protocol — write a new one with "
            "`protocol init --policy DIR`"
        )
    pins = policy_pins(policy)
    text = text.replace(_PIN_LINES[0], _yaml_map("model_files", pins["model_files"]))
    text = text.replace(_PIN_LINES[1], _yaml_map("tokenizer_files", pins["tokenizer_files"]))
    chat = pins["chat_template_sha256"]
    return text.replace(_PIN_LINES[2], f"  chat_template_sha256: {chat if chat else 'null'}\n")


def pin_hub_revision_text(text: str, hub_path: str, snapshot: Path) -> tuple[str, str]:
    """``text`` with ``policy.path: hf://ORG/NAME@REVISION`` naming the commit of the cached
    ``snapshot`` it resolved to (a branch or tag can move; a commit names these files)."""
    from creditaudit.protocol.hub import parse_hub_path

    commit = snapshot.name
    pinned = parse_hub_path(hub_path).text(commit)
    if pinned != hub_path:
        if text.count(hub_path) != 1:
            raise InputError(f"policy.path {hub_path!r} appears {text.count(hub_path)} times in the protocol text; "
                             f"write the commit yourself: {pinned}")
        text = text.replace(hub_path, pinned)
    return text, commit


_PLUGINS_LINE = re.compile(r"(?m)^plugins:[ \t]*\[\][ \t]*(#.*)?$")


def pin_plugins_text(text: str, protocol: Any) -> str:
    """``text`` with a ``plugins`` section pinning every plugin the protocol uses (its placeholder
    ``plugins: []`` replaced, or the section appended when the file has none)."""
    from creditaudit import plugins

    if protocol.plugins:
        raise InputError("the protocol's `plugins` section is already filled; pinning rewrites only an unpinned protocol")
    pins = [plugins.pin_of(kind, name) for kind, name in protocol.plugins_used()]
    block = "plugins:                       # written by `creditaudit protocol pin`\n" + "".join(
        "  - " + json.dumps(pin, sort_keys=False) + "\n" for pin in pins)
    if _PLUGINS_LINE.search(text):
        return _PLUGINS_LINE.sub(lambda _m: block.rstrip("\n"), text, count=1)
    if re.search(r"(?m)^plugins:", text):
        raise InputError("the protocol's `plugins` key is written in a form `protocol pin` cannot rewrite; "
                         "write `plugins: []` and pin again")
    return text.rstrip("\n") + "\n\n" + block


_GAMES_LINES = {
    "source": re.compile(r"(?m)^  source:[ \t]*generated[ \t]*(#.*)?$"),
    "data_dir": re.compile(r"(?m)^  data_dir:[ \t]*null[ \t]*(#.*)?$"),
    "games": re.compile(r"(?m)^  games:[ \t]*\[\][ \t]*(#.*)?$"),
}


_GAMES_FORM = {"source": "source: generated", "data_dir": "data_dir: null", "games": "games: []"}


def pin_games_text(text: str, protocol: Any, games: Path) -> tuple[str, int]:
    """``text`` with every solvable game file under ``games`` (an ALFWorld data directory or a split
    of it) pinned: ``source: directory``, ``data_dir`` the directory, and one ``games`` entry (path
    relative to it, SHA-256, task type) per game of the generator's task types. Returns the text
    and the number of games."""
    from creditaudit.replay.envs.alfworld.game_files import load_tasks
    from creditaudit.replay.tasks import environment_plugin

    caps = environment_plugin(protocol).capabilities
    if caps.generates_tasks:
        raise InputError(f"`--games`: the {protocol.environment.name} environment makes its own tasks; only an "
                         "environment whose tasks are game files (alfworld) pins games")
    if protocol.environment.games:
        raise InputError("`--games`: the protocol's `environment.games` is already filled; pinning rewrites only "
                         "an unpinned protocol")
    root = Path(os.path.expandvars(str(games))).expanduser()
    tasks = load_tasks(root, task_types=protocol.environment.generator.task_types)
    if not tasks:
        raise InputError(f"`--games {games}`: no solvable game file (game.tw-pddl with traj_data.json) of the "
                         f"task types {', '.join(protocol.environment.generator.task_types)} under {root}")
    for key, pattern in _GAMES_LINES.items():
        if not pattern.search(text):
            raise InputError(f"`--games`: the protocol's `environment.{key}` line is not the template's "
                             f"`{_GAMES_FORM[key]}`; pin games into an unedited template")
    entries = "".join(
        "    - " + json.dumps({"path": Path(t.source).resolve().relative_to(root.resolve()).as_posix(),
                               "sha256": t.task_id, "task_type": t.task_type}) + "\n"
        for t in sorted(tasks, key=lambda t: Path(t.source).as_posix()))
    text = _GAMES_LINES["source"].sub("  source: directory", text, count=1)
    # a directory named through an environment variable stays portable; any other is made absolute
    where = str(games) if str(games).startswith("$") else str(root.resolve())
    text = _GAMES_LINES["data_dir"].sub(lambda _m: f"  data_dir: {json.dumps(where)}", text, count=1)
    text = _GAMES_LINES["games"].sub(lambda _m: "  games:                       # written by `creditaudit protocol "
                                     "pin --games`\n" + entries.rstrip("\n"), text, count=1)
    return text, len(tasks)


@app.command("pin")
def pin_command(
    path: Path = typer.Argument(..., help="A protocol not yet frozen."),
    policy: Path | None = typer.Option(None, "--policy", help="Policy directory (default: the protocol's policy.path)."),
    games: Path | None = typer.Option(
        None, "--games",
        help="ALFWorld data directory (or a split of it): hash every solvable game file into `environment.games`."),
) -> None:
    """Pin the protocol's inputs before freezing: the policy's files, every plugin it uses, and (with
    ``--games``) the game files of a user's ALFWorld data directory."""
    from creditaudit.protocol.lock import lock_path_for, policy_dir

    if lock_path_for(path).exists():
        raise InputError(f"{path}: already frozen; a frozen protocol is never edited (amend instead)")
    protocol = load_protocol(path)
    text = path.read_text("utf-8")
    said = []
    if games is not None:
        text, n_games = pin_games_text(text, protocol, games)
        said.append(f"{n_games} game file(s) of {games}")
    if not protocol.policy.model_files:
        directory = policy or policy_dir(protocol, path)
        text = pin_policy_text(text, directory)
        said.append(f"the files of {directory}")
        if policy is None and is_hub_path(protocol.policy.path):
            text, commit = pin_hub_revision_text(text, protocol.policy.path, directory)
            said.append(f"{protocol.policy.path}'s commit {commit}")
    elif policy is not None:
        raise InputError(f"{path}: the policy is already pinned; `--policy` pins only an unpinned one")
    if not protocol.plugins:
        text = pin_plugins_text(text, protocol)
        said.append(f"{len(protocol.plugins_used())} plugin(s)")
    if not said:
        raise InputError(f"{path}: the policy and the plugins are already pinned; nothing to pin")
    pinned = parse_protocol(text, source=str(path))
    write_bytes_atomic(path, text.encode("utf-8"))
    typer.echo(f"pinned {' and '.join(said)} into {path} (protocol id {pinned.id})")


@app.command("migrate")
def migrate_command(
    old: Path = typer.Argument(..., help="A protocol of an older schema version."),
    new: Path = typer.Argument(..., help="Where to write it in the current schema (never overwritten)."),
) -> None:
    """Rewrite an older protocol in the current schema (a new protocol, with a new id, to pin and freeze)."""
    import yaml

    from creditaudit.protocol.io import migrate, yaml_error_message

    file_to_write(new, "`protocol migrate OLD NEW`")
    if new.exists():
        raise InputError(f"{new}: already exists; `protocol migrate` never overwrites (choose another path)")
    try:
        data = yaml.safe_load(old.read_text("utf-8"))
    except FileNotFoundError:
        raise InputError(f"{old}: protocol file not found") from None
    except yaml.YAMLError as exc:
        raise InputError(yaml_error_message(exc, str(old))) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{old}: cannot read the protocol ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{old}: a protocol is a YAML mapping at the top level")
    data = migrate(data, source=str(old))
    data.pop("plugins", None)
    data["amends"] = None
    text = (f"# migrated by `creditaudit protocol migrate` from {old.name} (comments are not carried over)\n"
            + yaml.safe_dump(data, sort_keys=False, width=100))
    protocol = parse_protocol(text, source=str(new))
    new.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(new, text.encode("utf-8"))
    typer.echo(f"wrote {new} (schema version {protocol.version}, protocol id {protocol.id}); pin and freeze it")


@app.command("keygen")
def keygen_command(
    out: Path = typer.Option(Path("keys"), "--out", help="Directory for creditaudit.key / creditaudit.pub."),
) -> None:
    """Make an Ed25519 key pair for signing locks and stage links (never overwrites)."""
    private, public = generate_keypair(dir_to_write(out, "--out"))
    typer.echo(f"wrote {private} (private, mode 600) and {public}")


@app.command("id")
def id_command(path: Path = typer.Argument(..., help="Protocol YAML file.")) -> None:
    """Validate a protocol and print its id (SHA-256 of its canonical identity view)."""
    typer.echo(load_protocol(path).id)


@app.command("freeze")
def freeze_command(
    path: Path = typer.Argument(..., help="Protocol YAML file."),
    key: Path | None = typer.Option(None, "--key", help="Private key (default: keys/creditaudit.key beside the protocol)."),
    registry: Path | None = typer.Option(None, "--registry", help="Registry file (default: registry.jsonl beside it)."),
) -> None:
    """Sign the protocol, write its lock, append it to the hash-chained registry."""
    if registry is not None:
        file_to_write(registry, "--registry")
    signer = load_signer(key or default_key_path(path))
    lock = freeze(path, signer, registry_path=registry)
    typer.echo(f"frozen {path.name}: protocol id {lock.protocol_id}")
    typer.echo(f"lock {lock_path_for(path)} at {lock.freeze_time} by key {lock.key_id[:16]}…")


@app.command("verify")
def verify_command(
    path: Path = typer.Argument(..., help="Protocol YAML file."),
    registry: Path | None = typer.Option(None, "--registry", help="Registry file (default: registry.jsonl beside it)."),
    pubkey: Path | None = typer.Option(None, "--pubkey", help="Trusted public key the lock must be signed by."),
    inputs: bool = typer.Option(True, "--inputs/--no-inputs", help="Re-hash the pinned policy files."),
) -> None:
    """Recompute id, signature, registry chain and pins; exit 1 with a field-level diff on any change."""
    if registry is not None:
        existing_file(registry, "--registry")
    report = verify(path, registry_path=registry, public_key_path=pubkey, check_inputs=inputs)
    if not report.ok:
        raise CheckFailed(f"{path}: verification failed\n{report.render()}")
    typer.echo(report.render())


@app.command("amend")
def amend_command(
    parent: Path = typer.Argument(..., help="The frozen parent protocol."),
    child: Path = typer.Argument(..., help="The amended protocol (a new file; `amends:` is written if absent)."),
    reason: str = typer.Option(..., "--reason", help="Why the frozen protocol is amended (recorded and signed)."),
    key: Path | None = typer.Option(None, "--key", help="Private key (default: keys/creditaudit.key beside the parent)."),
    registry: Path | None = typer.Option(None, "--registry", help="Registry file (default: the parent's)."),
) -> None:
    """Freeze a child protocol that names its parent; the registry keeps both and the deviations."""
    if registry is not None:
        file_to_write(registry, "--registry")
    signer = load_signer(key or default_key_path(parent))
    lock = amend(parent, child, signer, reason=reason, registry_path=registry)
    typer.echo(f"amended {parent.name} -> {child.name}: protocol id {lock.protocol_id}")
    for change in lock.deviations:
        typer.echo(f"  deviation {change['path']}: {change['old']!r} -> {change['new']!r}")
