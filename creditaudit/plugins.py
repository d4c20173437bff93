"""Open registries: credit families, environments, proposers and training-arm rules.

Every pluggable part of an audit is a *factory* published under a Python entry-point group, and
the toolkit's own built-ins take exactly the path a third party takes (they are declared under the
same groups in creditaudit's ``pyproject.toml``):

=============  ============================  ===============================================
kind           entry-point group             the factory returns
=============  ============================  ===============================================
family         ``creditaudit.families``      a :class:`creditaudit.signals.CreditFamily`
environment    ``creditaudit.environments``  an :class:`creditaudit.replay.envs.EnvironmentPlugin`
proposer       ``creditaudit.proposers``     a ProVer segment proposer
arm_rule       ``creditaudit.arm_rules``     a training-arm credit rule
=============  ============================  ===============================================

A factory's signature is the only statement of its arguments. The protocol names a plugin
(``family: NAME``, ``environment.name: NAME``) and passes ``args``; :meth:`Plugin.bind` validates
them against the signature -- keyword parameters with type annotations, constraints written as
``Annotated[float, Field(gt=0)]``, defaults applied -- and returns the normalised arguments the
protocol freezes. Reserved parameters (``name`` for a family: the protocol's signal name) are
passed by the toolkit, never written in ``args``. A factory must be cheap and free of side
effects: validation calls it to run the plugin's own cross-argument checks.

Pins: :func:`pin_of` records a plugin's distribution, version and a SHA-256 of its module source
(the file defining the factory, or every ``.py`` file of the package when the factory lives in a
package's ``__init__``); ``creditaudit protocol pin`` writes the pins of every plugin a protocol
uses into its ``plugins`` section, and every stage refuses to run when an installed plugin differs
from its pin (exit 1, naming the plugin).

Examples
--------
>>> sorted(names("family"))[:3]
['confidence', 'gigpo', 'grpo']
>>> get("family", "confidence").distribution
'creditaudit'
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, ValidationError, create_model

from creditaudit.errors import CheckFailed, InputError

__all__ = [
    "GROUPS",
    "RESERVED",
    "Plugin",
    "plugins",
    "names",
    "get",
    "pin_of",
    "check_pins",
    "reload",
    "source_sha256",
]

#: Entry-point group of every plugin kind.
GROUPS: dict[str, str] = {
    "family": "creditaudit.families",
    "environment": "creditaudit.environments",
    "proposer": "creditaudit.proposers",
    "arm_rule": "creditaudit.arm_rules",
}

#: Parameters the toolkit passes itself, per kind (never part of a protocol's ``args``).
RESERVED: dict[str, frozenset[str]] = {
    "family": frozenset({"name"}),
    "environment": frozenset({"horizon"}),
    "proposer": frozenset(),
    "arm_rule": frozenset(),
}

_ARGS_CONFIG = ConfigDict(extra="forbid", strict=True, arbitrary_types_allowed=False)


def _kind_iv(kind: str) -> str:
    if kind not in GROUPS:
        raise ValueError(f"`kind` must be one of {set(GROUPS)}; got {kind!r}")
    return kind


def source_sha256(module_name: str) -> str:
    """SHA-256 of a module's source: its file, or every ``.py`` file under a package (by relative
    path, sorted), so that any edit of the code a plugin runs changes the hash.

    Examples
    --------
    >>> len(source_sha256("creditaudit.errors"))
    64
    """
    module = importlib.import_module(module_name)
    file = getattr(module, "__file__", None)
    if not file:
        raise InputError(f"plugin module {module_name!r} has no source file to pin")
    path = Path(file)
    digest = hashlib.sha256()
    if path.name == "__init__.py":
        root = path.parent
        for f in sorted(root.rglob("*.py")):
            if "__pycache__" in f.parts:
                continue
            rel = f.relative_to(root).as_posix().encode()
            data = f.read_bytes()
            digest.update(len(rel).to_bytes(8, "big") + rel + len(data).to_bytes(8, "big") + data)
    else:
        data = path.read_bytes()
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True)
class Plugin:
    """One installed plugin: its kind, name, the entry point that publishes it and its distribution.

    Attributes
    ----------
    kind : str
        ``family``, ``environment``, ``proposer`` or ``arm_rule``.
    name : str
        The name a protocol uses (the entry point's name).
    target : str
        The entry point's value, ``module:attribute``.
    distribution : str
        The installed distribution that declares the entry point (``creditaudit`` for built-ins).
    version : str
        That distribution's version.
    """

    kind: str
    name: str
    target: str
    distribution: str
    version: str

    @property
    def module(self) -> str:
        return self.target.split(":", 1)[0]

    @cached_property
    def factory(self) -> Callable[..., Any]:
        """The factory the entry point names (imported on first use)."""
        module_name, _, attr = self.target.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except Exception as exc:  # an installed plugin that cannot load: say which and why
            raise InputError(
                f"{self.kind} {self.name!r}: entry point {self.target!r} of distribution {self.distribution} "
                f"{self.version} does not load ({type(exc).__name__}: {exc}); reinstall or fix that package"
            ) from None
        if not callable(obj):
            raise InputError(f"{self.kind} {self.name!r}: entry point {self.target!r} is not callable")
        return obj

    @cached_property
    def _args_model(self) -> Any:
        signature = inspect.signature(self.factory)
        try:
            hints = typing.get_type_hints(self.factory, include_extras=True)
        except Exception as exc:
            raise InputError(f"{self.kind} {self.name!r}: the factory's annotations do not resolve ({exc})") from None
        fields: dict[str, Any] = {}
        for pname, param in signature.parameters.items():
            if pname in RESERVED[self.kind]:
                continue
            if param.kind not in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD):
                raise InputError(
                    f"{self.kind} {self.name!r}: factory parameter {pname!r} must be a keyword parameter "
                    "(a protocol passes `args` by name)"
                )
            annotation = hints.get(pname, Any)
            default = ... if param.default is param.empty else param.default
            fields[pname] = (annotation, default)
        return create_model(f"{self.name}_args", __config__=_ARGS_CONFIG, **fields)

    def parameters(self) -> list[str]:
        """The argument names a protocol's ``args`` may hold."""
        return list(self._args_model.model_fields)

    def bind(self, args: dict[str, Any] | None, *, where: str = "args") -> dict[str, Any]:
        """Validate ``args`` against the factory's signature; the full, normalised arguments (JSON
        values, defaults applied) -- what the protocol freezes. A parameter annotated with
        :data:`~creditaudit.protocol.fields.ADDED_LATER` is left out while it has its default, so a
        protocol frozen before the factory gained it keeps its id.

        Raises
        ------
        ValueError
            Naming every argument that is unknown, missing or of the wrong type, and the
            parameters the factory takes.
        """
        try:
            model = self._args_model.model_validate(dict(args or {}))
        except ValidationError as exc:
            problems = "; ".join(
                f"`{'.'.join(map(str, e['loc'])) or '(args)'}`: {e['msg']}" for e in exc.errors(include_url=False)
            )
            raise ValueError(
                f"{where} of {self.kind} {self.name!r} ({self.distribution} {self.version}): {problems}; "
                f"it takes {', '.join(self.parameters()) or 'no arguments'}"
            ) from None
        from creditaudit.protocol.fields import ADDED_LATER

        bound = model.model_dump(mode="json")
        for pname, info in type(model).model_fields.items():
            if any(m is ADDED_LATER for m in info.metadata) and getattr(model, pname) == info.get_default(
                    call_default_factory=True):
                del bound[pname]
        return bound

    def create(self, args: dict[str, Any] | None = None, **reserved: Any) -> Any:
        """Build the plugin's object from (already bound or raw) ``args`` and the reserved arguments."""
        bound = self._args_model.model_validate(dict(args or {}))
        values = {name: getattr(bound, name) for name in self._args_model.model_fields}
        accepted = inspect.signature(self.factory).parameters
        missing = sorted(set(reserved) - set(accepted))
        if missing:
            raise InputError(
                f"{self.kind} {self.name!r}: its factory {self.target} ({self.distribution}) must take the "
                f"parameter(s) {', '.join(missing)}, which the toolkit passes itself"
            )
        try:
            return self.factory(**values, **reserved)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 -- any failure of a plugin's own checks names the plugin
            message = str(exc)
            if not message.startswith(f"{self.kind} {self.name!r}"):
                message = f"{self.kind} {self.name!r} ({self.distribution} {self.version}): {message}"
            if not isinstance(exc, ValueError):
                message += f" ({type(exc).__name__} raised by its factory {self.target})"
            raise InputError(message) from exc

    def pin(self) -> dict[str, str]:
        """``{kind, name, distribution, version, source_sha256}`` of the installed plugin."""
        return {"kind": self.kind, "name": self.name, "distribution": self.distribution, "version": self.version,
                "source_sha256": source_sha256(self.module)}


_CACHE: dict[str, dict[str, Plugin]] = {}


def _discover(kind: str) -> dict[str, Plugin]:
    found: dict[str, Plugin] = {}
    for ep in metadata.entry_points(group=GROUPS[kind]):
        dist = getattr(ep, "dist", None)
        distribution = dist.metadata["Name"] if dist is not None else "(unknown)"
        version = dist.version if dist is not None else "(unknown)"
        plugin = Plugin(kind=kind, name=ep.name, target=ep.value, distribution=distribution, version=version)
        previous = found.get(ep.name)
        if previous is not None and (previous.target, previous.distribution) != (plugin.target, plugin.distribution):
            raise InputError(
                f"{kind} {ep.name!r} is published twice: by {previous.distribution} ({previous.target}) and by "
                f"{plugin.distribution} ({plugin.target}); uninstall one of them"
            )
        found[ep.name] = plugin
    if not found:
        raise InputError(
            f"no {kind} plugin is installed (entry-point group {GROUPS[kind]} is empty): creditaudit itself is "
            "not installed as a distribution; install it with `pip install -e .`"
        )
    return found


def plugins(kind: str) -> dict[str, Plugin]:
    """Every installed plugin of ``kind`` by name (entry points read once per process; see :func:`reload`)."""
    kind = _kind_iv(kind)
    if kind not in _CACHE:
        _CACHE[kind] = _discover(kind)
    return _CACHE[kind]


def names(kind: str) -> list[str]:
    """Installed plugin names of ``kind``, sorted."""
    return sorted(plugins(kind))


def reload() -> None:
    """Forget what was discovered (after installing or removing a distribution in this process)."""
    _CACHE.clear()
    importlib.invalidate_caches()  # also clears importlib.metadata's path caches


def get(kind: str, name: str, *, where: str | None = None) -> Plugin:
    """The installed plugin ``name`` of ``kind``.

    Raises
    ------
    ValueError
        When no installed distribution publishes it (an unknown plugin is an error, never a silent
        default), listing the installed ones and saying how to add one.
    """
    table = plugins(kind)
    if name not in table:
        prefix = f"{where}: " if where else ""
        raise ValueError(
            f"{prefix}unknown {kind.replace('_', ' ')} {name!r}; installed: {', '.join(sorted(table))}. A third-party "
            f"{kind.replace('_', ' ')} is installed as a distribution publishing entry-point group {GROUPS[kind]}"
        )
    return table[name]


def pin_of(kind: str, name: str) -> dict[str, str]:
    """The pin of an installed plugin (see :meth:`Plugin.pin`)."""
    return get(kind, name).pin()


def check_pins(pins: Iterable[dict[str, Any]], *, source: str) -> None:
    """Refuse (``CheckFailed``, exit 1) when an installed plugin differs from its pin or is missing.

    Parameters
    ----------
    pins : iterable of dict
        ``{kind, name, distribution, version, source_sha256}`` as ``protocol pin`` wrote them.
    source : str
        The protocol file, named in the message.
    """
    problems: list[str] = []
    for pin in pins:
        kind, name = pin["kind"], pin["name"]
        table = plugins(kind) if kind in GROUPS else {}
        plugin = table.get(name)
        label = f"{kind} plugin {name!r} ({pin['distribution']} {pin['version']})"
        if plugin is None:
            problems.append(f"{label} is pinned but not installed; install {pin['distribution']}=={pin['version']}")
            continue
        if plugin.distribution != pin["distribution"]:
            problems.append(f"{label} is now published by {plugin.distribution}, not {pin['distribution']}")
            continue
        if plugin.version != pin["version"]:
            problems.append(f"{label}: installed version is {plugin.version}, pinned {pin['version']}")
        try:
            digest = source_sha256(plugin.module)
        except (ImportError, InputError) as exc:
            problems.append(f"{label}: its module {plugin.module} does not load ({exc})")
            continue
        if digest != pin["source_sha256"]:
            problems.append(
                f"{label}: its source ({plugin.module}) changed after the protocol was pinned "
                f"(SHA-256 {digest[:12]}…, pinned {pin['source_sha256'][:12]}…)"
            )
    if problems:
        raise CheckFailed(
            f"{source}: the installed plugins differ from the ones the protocol pins:\n  " + "\n  ".join(problems)
            + "\n  Reinstall the pinned versions, or amend the protocol (`creditaudit protocol amend`)."
        )
