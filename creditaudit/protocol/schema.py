"""The protocol: a typed, frozen, versioned description of an audit, fixed before any data exists.

Every section docs/design.md §1 lists is a model here: environment and task source, policy and its
pinned content hashes, sampling, collection, replay budget, every signal's constants, the
controls, statistics settings, exclusion rules, the gates (hypotheses) and their decision order,
the confirmatory tests, and the training-arms experiment.

Identity: the protocol id is the SHA-256 of the RFC 8785 canonical JSON of the *identity view*
(:func:`identity_dict`), which drops free-text fields (``description``, ``notes``) and keeps every
threshold, seed and constant.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    model_validator,
)

__all__ = [
    "PROTOCOL_VERSION",
    "TASK_TYPES",
    "AUDIT_STATISTICS",
    "GATE_STATISTICS",
    "FreeText",
    "Protocol",
    "EnvironmentSection",
    "GeneratorSettings",
    "GameFile",
    "PolicySection",
    "PolicyServer",
    "PolicyBuild",
    "CollectionSection",
    "ReplaySection",
    "ComputeSection",
    "SignalSpec",
    "ControlSpec",
    "StatisticsSection",
    "ExclusionSection",
    "Gate",
    "Predicate",
    "Compare",
    "AllOf",
    "AnyOf",
    "Not",
    "Overlaps",
    "Contains",
    "Always",
    "HypothesesSection",
    "ArmsSection",
    "PluginPin",
    "RouterSection",
    "identity_dict",
    "protocol_id",
]

from creditaudit.protocol.fields import (  # noqa: F401  (re-exported)
    TASK_TYPES,
    GATE_STATISTICS,
    AUDIT_STATISTICS,
    NON_IDENTITY,
    ADDED_LATER,
    FreeText,
    Sha256,
    Name,
    StrictModel,
    finite,
    no_repeats,
    resolve_plugin,
)
from creditaudit.protocol.gates import (  # noqa: F401  (re-exported)
    Gate,
    Predicate,
    Compare,
    AllOf,
    AnyOf,
    Not,
    Overlaps,
    Contains,
    ContainsSpec,
    Always,
    HypothesesSection,
    predicate_subjects,
)
from creditaudit.protocol.sections import (  # noqa: F401  (re-exported)
    EnvironmentSection,
    GeneratorSettings,
    GameFile,
    PolicySection,
    PolicyServer,
    PolicyBuild,
    ComputeSection,
    CollectionSection,
    ReplaySection,
    SignalSpec,
    ControlSpec,
    RouterSection,
    StatisticsSection,
    ExclusionSection,
    ArmsSection,
)

PROTOCOL_VERSION = 2


# --------------------------------------------------------------------------- protocol


class PluginPin(StrictModel):
    """An installed plugin as ``protocol pin`` found it: every stage refuses to run when the
    installed plugin differs (exit 1, naming it)."""

    kind: Literal["family", "environment", "proposer", "arm_rule"]
    """Plugin kind."""
    name: Name
    """The name the protocol uses."""
    distribution: str
    """The distribution that publishes it (``creditaudit`` for a built-in)."""
    version: str
    """That distribution's version."""
    source_sha256: Sha256
    """SHA-256 of the plugin's module source (its file, or every ``.py`` file of its package)."""


class Protocol(StrictModel):
    """A creditaudit protocol (schema version 2)."""

    version: Literal[2] = 2
    """Schema version; older versions are migrated explicitly, unknown versions refused."""
    amends: Sha256 | None = None
    """Id of the frozen parent protocol this one amends (``protocol amend``); null for an original."""
    name: Name = "creditaudit-default"
    """Short name of the audit."""
    description: FreeText = ""
    """Free text; not part of the protocol id."""
    notes: FreeText = ""
    """Free text; not part of the protocol id."""
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    """Environment and frozen task list."""
    policy: PolicySection = Field(default_factory=PolicySection)
    """Policy and its pinned hashes."""
    collection: CollectionSection = Field(default_factory=CollectionSection)
    """Trajectory collection."""
    replay: ReplaySection = Field(default_factory=ReplaySection)
    """Executed replay budget and constants."""
    signals: list[SignalSpec] = Field(min_length=1)
    """Credit families audited, with every constant."""
    controls: list[ControlSpec] = Field(min_length=1)
    """Control definitions."""
    router: RouterSection | None = None
    """Confidence router (optional: null when the audit has no confidence and judge family to route between)."""
    statistics: StatisticsSection = Field(default_factory=StatisticsSection)
    """Statistics settings."""
    exclusions: ExclusionSection = Field(default_factory=ExclusionSection)
    """Exclusion rules."""
    hypotheses: HypothesesSection = Field(default_factory=HypothesesSection)
    """Gates and decision order."""
    arms: ArmsSection = Field(default_factory=ArmsSection)
    """Training-arms experiment."""
    compute: Annotated[ComputeSection, NON_IDENTITY, ADDED_LATER] = Field(default_factory=ComputeSection)
    """Ray resources of replay (not part of the protocol id)."""
    plugins: list[PluginPin] = Field(default_factory=list)
    """Pins of the plugins this protocol uses (families, environment, proposers, arm rules), written
    by ``creditaudit protocol pin``; a plugin from a distribution other than creditaudit must be
    pinned before freezing."""

    @model_validator(mode="after")
    def _check_references(self) -> "Protocol":
        names = [s.name for s in self.signals]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"signal names must be unique; repeated: {', '.join(dupes)}")
        cnames = [c.name for c in self.controls]
        dupes = sorted({n for n in cnames if cnames.count(n) > 1} | (set(cnames) & set(names)))
        if dupes:
            raise ValueError(f"control names must be unique and differ from signal names; repeated: {', '.join(dupes)}")
        for control in self.controls:
            if control.of is not None and control.of not in names:
                raise ValueError(f"control {control.name!r}: `of` names unknown family {control.of!r}")
        if self.router is not None:
            for field_name in ("confidence_family", "judge_family"):
                family = getattr(self.router, field_name)
                if family not in names:
                    raise ValueError(f"router.{field_name} names unknown family {family!r}")
        keys = [(p.kind, p.name) for p in self.plugins]
        repeated = sorted({f"{k}:{n}" for k, n in keys if keys.count((k, n)) > 1})
        if repeated:
            raise ValueError(f"`plugins` pins {', '.join(repeated)} more than once")
        for name in self.hypotheses.confirmatory:
            if name not in names:
                raise ValueError(f"hypotheses.confirmatory names unknown family {name!r}")
        subjects = {s for g in self.hypotheses.gates for s in predicate_subjects(g.when)}
        for subject in sorted(subjects):
            if subject.startswith("control:") and subject[8:] not in cnames:
                raise ValueError(f"a gate refers to {subject!r}, which is not a defined control")
            if subject.startswith("family:") and subject[7:] not in names:
                raise ValueError(f"a gate refers to {subject!r}, which is not a defined family")
        for derived, kind in (("shuffle(self)", "shuffle"), ("inverted(self)", "inverted")):
            if derived in subjects:
                have = {c.of for c in self.controls if c.kind == kind}
                lacking = [n for n in names if n not in have]
                if lacking:
                    raise ValueError(
                        f"gates refer to {derived!r} but families {', '.join(lacking)} have no {kind} control"
                    )
        return self

    @property
    def id(self) -> str:
        """The protocol id: SHA-256 of the canonical identity view."""
        return protocol_id(self)

    def plugins_used(self) -> list[tuple[str, str]]:
        """Every ``(kind, name)`` plugin this protocol uses: its families (and the plugins each
        family declares it uses, such as ProVer's proposer), its environment and its training arms'
        rules."""
        used: list[tuple[str, str]] = [("environment", self.environment.name)]
        for spec in self.signals:
            used.append(("family", spec.family))
            family = resolve_plugin("family", spec.family).create(spec.args, name=spec.name)
            used += [tuple(u) for u in getattr(family, "uses", ())]
        used += [("arm_rule", name) for name in self.arms.arms]
        return list(dict.fromkeys(used))

    def control_of(self, family: str, kind: str) -> str:
        """Name of the ``kind`` control derived from ``family``."""
        for control in self.controls:
            if control.kind == kind and control.of == family:
                return control.name
        raise KeyError(f"family {family!r} has no {kind} control")


def identity_dict(model: BaseModel) -> dict[str, Any]:
    """The model as JSON values without free-text (:data:`FreeText`) fields, and without
    :data:`ADDED_LATER` fields left at their defaults, recursively."""

    def walk(obj: Any) -> Any:
        if isinstance(obj, BaseModel):
            out = {}
            for name, info in type(obj).model_fields.items():
                if any(m is NON_IDENTITY for m in info.metadata):
                    continue
                value = getattr(obj, name)
                if any(m is ADDED_LATER for m in info.metadata) and value == info.get_default(call_default_factory=True):
                    continue
                key = info.alias or name
                out[key] = walk(value)
            return out
        if isinstance(obj, dict):
            return {k: walk(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [walk(v) for v in obj]
        return obj

    return walk(model)


def protocol_id(protocol: Protocol) -> str:
    """SHA-256 (hex) of the RFC 8785 canonical JSON of the protocol's identity view."""
    from creditaudit.protocol.canonical import canonical_hash

    return canonical_hash(identity_dict(protocol))
