"""The ``creditaudit`` command line: one subcommand per stage.

Exit codes: 0 success, 1 a check failed, 2 bad usage or input.
"""

from __future__ import annotations

import sys

import typer
from typer.exceptions import TyperException
from rich.console import Console
from rich.markup import escape

from creditaudit import __version__
from creditaudit.errors import CreditAuditError

__all__ = ["app", "main", "console", "err_console"]

console = Console()
err_console = Console(stderr=True)

app = typer.Typer(
    name="creditaudit",
    help=(
        "Audit step-level credit signals of LLM agents against executed counterfactual replay, "
        "under a protocol frozen before any data exists.\n\n"
        "Stages: protocol -> policy -> collect -> replay -> signals -> audit / arms -> ledger -> report."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        console.print(f"creditaudit {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """creditaudit command line."""


def _register_stages() -> None:
    from creditaudit.cli.protocol import app as protocol_app
    from creditaudit.cli.replay import collect_command, games_command, policy_app, replay_command

    app.add_typer(protocol_app, name="protocol")
    app.add_typer(policy_app, name="policy")
    app.command(name="games")(games_command)
    app.command(name="collect")(collect_command)
    app.command(name="replay")(replay_command)
    from creditaudit.cli.judge import judge_app

    app.add_typer(judge_app, name="judge")
    from creditaudit.cli.signals import signals_command
    from creditaudit.cli.audit import audit_command, export_command

    app.command(name="signals")(signals_command)
    app.command(name="audit")(audit_command)
    app.command(name="export")(export_command)
    from creditaudit.cli.calibrate import calibrate_command

    app.command(name="calibrate")(calibrate_command)
    from creditaudit.cli.ledger import ledger_app, report_command, results_command

    app.add_typer(ledger_app, name="ledger")
    app.command(name="report")(report_command)
    app.command(name="results")(results_command)
    from creditaudit.cli.arms import arms_command

    app.command(name="arms")(arms_command)

    from creditaudit.demo import demo_command

    app.command(name="demo")(demo_command)


_register_stages()


def _quiet_libraries() -> None:
    """The command line shows its own progress; transformers' per-load bars would drown it."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read by transformers at import


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app and map errors to exit codes (never a traceback for user errors)."""
    _quiet_libraries()
    try:
        result = app(args=argv, prog_name="creditaudit", standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except TyperException as exc:  # usage errors (click's, vendored by typer): exit 2
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:  # pragma: no cover - defensive
            err_console.print(f"error: {exc}")
        sys.exit(getattr(exc, "exit_code", 2))
    except CreditAuditError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except (FileExistsError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        # a path of the wrong kind that no command checked first: still bad usage, never a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        err_console.print(f"[bold red]error:[/] {escape(where + (exc.strerror or str(exc)))} (check the paths given "
                          "on the command line)", highlight=False, soft_wrap=True)
        sys.exit(2)
    sys.exit(result if isinstance(result, int) else 0)
