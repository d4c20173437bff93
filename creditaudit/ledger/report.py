"""``creditaudit report``: Markdown and HTML with figures, every number taken from the ledger by name.

The report is the template ``templates/report.md.jinja`` rendered against the ledger: the template
refers to entries by name only (``n(name)`` prints an entry's text, ``v(name)`` gives its value for
loops and conditions, ``has(name)`` tests for it), and holds no digit of its own. The figures are
drawn from ledger entries too (:mod:`creditaudit.ledger.figures`). The HTML is the same Markdown
rendered by ``markdown-it-py`` with the figures embedded.

The report refuses (never silently renders) a ledger that is missing or of another format (exit
2), of another protocol (exit 2), written by another code version, stale (an input changed since it
was written) or not the ledger the ledger stage attested (exit 1).
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from creditaudit.errors import CheckFailed, InputError
from creditaudit.ledger.catalogue import LEDGER_JSON, REPORT_DIR
from creditaudit.ledger.model import Ledger, code_version, read_ledger

__all__ = ["TEMPLATE_DIR", "ReportResult", "load_ledger_for_report", "render_markdown", "render_html", "template_environment",
           "write_report"]

TEMPLATE_DIR = Path(__file__).with_name("templates")
REPORT_MD = f"{REPORT_DIR}/report.md"
REPORT_HTML = f"{REPORT_DIR}/report.html"
FIGURES = ("forest", "measurability", "router", "arms")


@dataclass(frozen=True)
class ReportResult:
    """What ``write_report`` wrote."""

    markdown: Path
    html: Path
    figures: list[Path]
    referenced: frozenset[str]
    """Every ledger entry the template referred to."""

    @property
    def n_references(self) -> int:
        return len(self.referenced)


def load_ledger_for_report(run_dir: str | Path, *, ledger_path: str | Path | None = None) -> tuple[Any, Ledger, Path]:
    """The run's frozen protocol and its ledger, refusing a ledger the report must not render.

    Raises
    ------
    InputError
        No protocol, no ledger, not a ledger of this format, or a ledger of another protocol.
    CheckFailed
        A ledger of another code version, a stale ledger (an input's bytes changed since), or a
        ledger whose bytes are not what the ledger stage attested.
    """
    from creditaudit.ledger.build import protocol_path
    from creditaudit.protocol.canonical import sha256_file
    from creditaudit.protocol.links import LINKS_DIR, read_link
    from creditaudit.protocol.lock import require_frozen

    run_dir = Path(run_dir)
    frozen = require_frozen(protocol_path(run_dir))
    path = Path(ledger_path) if ledger_path else run_dir / LEDGER_JSON
    ledger = read_ledger(path)
    if ledger.protocol_id != frozen.id:
        raise InputError(f"{path}: the ledger belongs to protocol {ledger.protocol_id[:16]}…, this run's is "
                         f"{frozen.id[:16]}…; a report never mixes runs (regenerate the ledger in this run)")
    if ledger.code_version != code_version():
        raise CheckFailed(f"{path}: the ledger was written by code version {ledger.code_version}, this is "
                          f"{code_version()}; run `creditaudit ledger regenerate` with this version first")
    stale = []
    for record in ledger.artifacts:
        full = run_dir / record.path
        if not full.is_file():
            stale.append(f"{record.path} (missing)")
        elif sha256_file(full) != record.sha256:
            stale.append(record.path)
    if stale:
        raise CheckFailed(f"{path}: the ledger is stale — its inputs changed since it was written: {', '.join(stale)}; "
                          "`creditaudit ledger verify` shows which entries differ, `creditaudit ledger regenerate` "
                          "rebuilds it")
    try:
        rel = path.resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        rel = None
    if rel is not None:
        attested = None
        for link in sorted((run_dir / LINKS_DIR).glob("*.link.json")):
            for product in read_link(link).products:
                if product["name"] == rel:
                    attested = (product["digest"]["sha256"], link.name)
        if attested is not None and sha256_file(path) != attested[0]:
            raise CheckFailed(f"{path}: its bytes are not the ledger the ledger stage attested in {attested[1]}; "
                              "run `creditaudit ledger regenerate`")
    return frozen, ledger, path


def template_environment():
    """The Jinja environment of the templates in :data:`TEMPLATE_DIR` (strict: an undefined name is an error)."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(ledger: Ledger, *, figures: dict[str, Any] | None = None) -> tuple[str, frozenset[str]]:
    """Render the Markdown report from ``ledger``; returns the text and the entry names it referred to.

    Raises ``CheckFailed`` naming the entry when the template refers to one the ledger lacks.
    """
    import jinja2

    entries = ledger.entry_map()
    referenced: set[str] = set()

    def get(name: str):
        referenced.add(name)
        try:
            return entries[name]
        except KeyError:
            raise CheckFailed(f"the report refers to ledger entry {name!r}, which the ledger lacks; regenerate the "
                              "ledger with this version of creditaudit") from None

    figure_map = {name: None for name in FIGURES}
    figure_map.update(figures or {})
    template = template_environment().get_template("report.md.jinja")
    try:
        text = template.render(
            n=lambda name: _cell(get(name).text),
            v=lambda name: get(name).value,
            has=lambda name: name in entries,
            ledger=ledger,
            manifest=[{"path": a.path, "name": a.name, "digest": a.sha256} for a in ledger.artifacts],
            figures=figure_map,
        )
    except jinja2.TemplateError as exc:  # pragma: no cover - a template bug, not a user error
        raise RuntimeError(f"report template error: {exc}") from exc
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text, frozenset(referenced)


def render_html(markdown_text: str, *, title: str, figure_dir: Path | None = None) -> str:
    """The Markdown report as a standalone HTML page (figures under ``figure_dir`` embedded)."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown_text)
    if figure_dir is not None:
        def embed(match: re.Match) -> str:
            path = figure_dir / match.group(1)
            if not path.is_file():
                return match.group(0)
            data = base64.b64encode(path.read_bytes()).decode("ascii")
            return f'src="data:image/png;base64,{data}"'

        body = re.sub(r'src="figures/([A-Za-z0-9_\-]+\.png)"', embed, body)
    return template_environment().get_template("report.html.jinja").render(title=html.escape(title), body=body)


def write_report(run_dir: str | Path, *, ledger_path: str | Path | None = None, signer: Any = None) -> ReportResult:
    """Write ``report/report.md``, ``report/report.html`` and ``report/figures/`` from the run's ledger.

    Every file is written atomically; the outputs are attested by a link record (stage ``report``)
    when the ledger lies in the run directory.
    """
    from creditaudit.artifacts import write_bytes_atomic
    from creditaudit.figures import draw_figures

    run_dir = Path(run_dir)
    frozen, ledger, path = load_ledger_for_report(run_dir, ledger_path=ledger_path)
    out_dir = run_dir / REPORT_DIR
    figure_dir = out_dir / "figures"
    for old in figure_dir.glob("*.png") if figure_dir.is_dir() else []:
        old.unlink()  # a figure the ledger no longer supports must not linger
    figures = draw_figures(ledger.entry_map(), figure_dir)
    markdown_text, referenced = render_markdown(ledger, figures={k: f"figures/{p.name}" for k, p in figures.items()})
    title = f"creditaudit report — {ledger.entry_map()['protocol.name'].text}"
    html_text = render_html(markdown_text, title=title, figure_dir=figure_dir)

    outputs = [out_dir.resolve() / "report.md", out_dir.resolve() / "report.html", *(p.resolve() for p in figures.values())]

    def write() -> None:
        write_bytes_atomic(out_dir / "report.md", markdown_text.encode("utf-8"))
        write_bytes_atomic(out_dir / "report.html", html_text.encode("utf-8"))

    try:
        path.resolve().relative_to(run_dir.resolve())
        inside = True
    except ValueError:
        inside = False
    if inside:
        from creditaudit.protocol.links import StageLink
        from creditaudit.protocol.signing import load_signer

        if signer is None:
            key = run_dir / "keys" / "creditaudit.key"
            if not key.is_file():
                raise InputError(f"{key}: no signing key; the report's link record is signed with the run's key")
            signer = load_signer(key)
        with StageLink(frozen.run_dir, "report", frozen.id, signer, command=["creditaudit", "report"],
                       parameters={"code_version": ledger.code_version},
                       inputs=[frozen.path, frozen.path.with_name(frozen.path.stem + ".lock.json"), path.resolve()]) as link:
            write()
            for output in outputs:
                link.add_output(output)
    else:
        write()
    return ReportResult(out_dir / "report.md", out_dir / "report.html", list(figures.values()), referenced)
