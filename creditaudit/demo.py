"""``creditaudit demo``: the main job on the embedded default, from nothing."""

from __future__ import annotations

__all__ = ["demo_command"]


def demo_command() -> None:
    """Run the end-to-end demo in a run directory (see README)."""
    from creditaudit.errors import NotYetAvailable

    raise NotYetAvailable("the demo is being assembled")
