"""``creditaudit protocol ...``"""

import typer

app = typer.Typer(help="Protocol: write, sign, freeze, verify, amend.", no_args_is_help=True)
