"""Progress display for long work: one bar per phase with done/total, rate and time left."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["progress_bars"]


@contextmanager
def progress_bars(*, console: Console | None = None, enabled: bool = True) -> Iterator[Callable[[str, int, int], None]]:
    """Yield ``update(phase, done, total)``; each phase gets its own bar (to stderr)."""
    if not enabled:
        yield lambda phase, done, total: None
        return
    progress = Progress(
        TextColumn("[bold]{task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=console or Console(stderr=True),
        transient=False,
    )
    bars: dict[str, int] = {}

    def update(phase: str, done: int, total: int) -> None:
        if phase not in bars:
            bars[phase] = progress.add_task(phase, total=total)
        progress.update(bars[phase], completed=done, total=total)

    with progress:
        yield update
