"""The protocol: a typed, frozen, versioned description of an audit, fixed before any data exists.

Every section SPEC.md §1 lists is a model here: environment and task source, policy and its
pinned content hashes, sampling, collection, replay budget, every signal's constants, the
controls, statistics settings, exclusion rules, the gates (hypotheses) and their decision order,
the confirmatory tests, and the training-arms experiment.

Identity: the protocol id is the SHA-256 of the RFC 8785 canonical JSON of the *identity view*
(:func:`identity_dict`), which drops free-text fields (``description``, ``notes``) and keeps every
threshold, seed and constant.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
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

PROTOCOL_VERSION = 2

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

#: Statistics the audit produces for every subject (a family or a control), in the order of its
#: statistics table -- the one list of them: the audit builds each subject's row of the table the
#: gates read from exactly these names (:meth:`creditaudit.audit.fidelity.SubjectStats.gate_row`,
#: ``p_holm`` added by :func:`creditaudit.audit.core.audit_tables`), and a predicate naming anything
#: else is rejected when the protocol is validated.
GATE_STATISTICS = (
    "estimate",  # median within-trajectory Spearman(credit, A_replay)
    "ci_low",
    "ci_high",
    "p_value",
    "p_holm",  # Holm-adjusted p_value across the confirmatory families (null for a control)
    "n_trajectories",
    "n_included_turns",
    "n_pivotal_turns",
    "sign_agreement",
    "sign_ci_low",
    "sign_ci_high",
    "lift",
    "lift_ci_low",
    "lift_ci_high",
    # the same on resolved-pivotal turns (the turn's A_replay interval excludes 0, SPEC.md §3)
    "n_resolved_pivotal_turns",
    "sign_agreement_resolved",
    "sign_agreement_resolved_ci_low",
    "sign_agreement_resolved_ci_high",
    "lift_resolved",
    "lift_resolved_ci_low",
    "lift_resolved_ci_high",
)
AUDIT_STATISTICS = frozenset(GATE_STATISTICS)


class _NonIdentity:
    """Marker: this field is free text and does not enter the protocol id."""

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return "NonIdentity"


NON_IDENTITY = _NonIdentity()

#: Free text (descriptions, notes): recorded in the lock, excluded from the protocol id.
FreeText = Annotated[str, NON_IDENTITY]


class _AddedLater:
    """Marker: a field added to schema version 1 after protocols were frozen under it. It enters
    the protocol id only when it differs from its default, so a protocol frozen before the field
    existed keeps its id (and its lock verifies). The default must be the behaviour the code had
    before the field existed, and it never changes."""

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return "AddedLater"


ADDED_LATER = _AddedLater()

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Name = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_\-]*$", max_length=64)]


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        use_attribute_docstrings=True,
        validate_default=True,
    )


def _finite(value: float, name: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"`{name}` must be finite")
    return value


def _no_repeats(values: list) -> list:
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"values must not repeat; repeated: {', '.join(repeated)}")
    return values


# --------------------------------------------------------------------------- environment


class GeneratorSettings(_Model):
    """Settings of the offline ALFRED-domain game generator (games are data, generated after freeze
    from the protocol's seed stream ``games/generate``)."""

    task_types: list[Literal[TASK_TYPES]] = Field(default_factory=lambda: list(TASK_TYPES), min_length=1)  # type: ignore[valid-type]
    """ALFWorld task types to generate, from the six ALFRED types."""
    games_per_type: int = Field(4, ge=1, le=10_000)
    """Games generated per task type."""
    max_objects: int = Field(20, ge=2, le=200)
    """Upper bound on object instances placed in a room (keeps engine steps cheap)."""
    max_receptacles: int = Field(16, ge=2, le=100)
    """Upper bound on receptacle instances in a room."""
    floorplans: list[int] = Field(default_factory=list)
    """FloorPlan numbers allowed; empty means every layout the alfworld package ships."""

    @field_validator("task_types", "floorplans")
    @classmethod
    def _unique(cls, values: list) -> list:
        return _no_repeats(values)


class GameFile(_Model):
    """A user-supplied game file: an input, pinned by content hash before freezing."""

    path: str
    """Path relative to the environment's data directory."""
    sha256: Sha256
    """SHA-256 of the game file's bytes."""
    task_type: Literal[TASK_TYPES]  # type: ignore[valid-type]
    """ALFWorld task type of the game."""


class EnvironmentSection(_Model):
    """Which environment, which tasks, how long an episode may run."""

    name: Name = "alfworld"
    """The environment plugin (entry-point group ``creditaudit.environments``): a built-in
    (``alfworld``: the real ALFWorld engine; ``planted``: the planted-effect environment;
    ``scienceworld``: ScienceWorld, extra ``[scienceworld]``) or a third party's."""
    source: Literal["generated", "directory"] = "generated"
    """``generated``: tasks made after the freeze (ALFWorld games by the offline generator, or the
    environment's own task list); ``directory``: the user's ALFWorld data directory, with every game
    pinned in ``games`` (only for an environment whose tasks are game files)."""
    data_dir: str | None = None
    """ALFWorld data directory for ``source: directory`` (``$ALFWORLD_DATA`` when null)."""
    generator: GeneratorSettings = Field(default_factory=GeneratorSettings)
    """Generator settings (used when ``source: generated`` for an environment whose tasks are game files)."""
    games: list[GameFile] = Field(default_factory=list)
    """Frozen task list of user-supplied games (required when ``source: directory``)."""
    horizon: int = Field(50, ge=1, le=1000)
    """Maximum agent steps per episode; reaching it ends the episode with outcome 0. The default
    is ALFWorld's customary limit, the one the papers train and evaluate under (VICT, GiGPO:
    at most 50 environment steps)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """The environment's arguments, by its factory's parameter names (validated against the
    signature, defaults applied, so the frozen protocol holds every constant); ``horizon`` is passed
    from the field above."""

    @model_validator(mode="before")
    @classmethod
    def _bind_args(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "params" in data:
            raise ValueError(
                "`params` was renamed `args` (the environment's factory arguments, validated against its "
                "signature); rename the key"
            )
        name = data.get("name", "alfworld")
        if not isinstance(name, str):
            return data
        plugin = _plugin("environment", name)
        args = data.get("args", {})
        if not isinstance(args, dict):
            raise ValueError(f"environment {name!r}: `args` must be a mapping of the environment's arguments")
        bound = plugin.bind(args, where=f"environment {name!r}: args")
        horizon = data.get("horizon", 50)
        if isinstance(horizon, int) and not isinstance(horizon, bool) and 1 <= horizon <= 1000:
            from creditaudit.replay.envs.plugin import EnvironmentPlugin

            made = plugin.create(bound, horizon=horizon)  # the environment's own cross-argument checks
            if not isinstance(made, EnvironmentPlugin):
                raise ValueError(
                    f"environment {name!r}: its factory {plugin.target} ({plugin.distribution}) returned a "
                    f"{type(made).__name__}, not a creditaudit.replay.envs.EnvironmentPlugin"
                )
        return {**data, "args": bound}

    def plugin(self) -> Any:
        """The environment plugin bound to these arguments (an
        :class:`~creditaudit.replay.envs.EnvironmentPlugin`; cheap, no engine started)."""
        return _plugin("environment", self.name).create(self.args, horizon=self.horizon)

    @model_validator(mode="after")
    def _check_source(self) -> "EnvironmentSection":
        if self.source == "directory" and not self.games:
            raise ValueError("`games` must list every pinned game file when `source` is 'directory'")
        if self.source == "generated" and self.games:
            raise ValueError("`games` must be empty when `source` is 'generated' (generated games are data)")
        if self.plugin().capabilities.generates_tasks and self.source != "generated":
            raise ValueError(f"the {self.name} environment generates its own tasks: `source` must be 'generated'")
        return self


# --------------------------------------------------------------------------- policy


class PolicyBuild(_Model):
    """Configuration of the embedded default policy (``creditaudit policy build``)."""

    seed: int = Field(20260817, ge=0, lt=2**53)
    """Seed of the build's own streams (the policy is an input: it exists before the protocol)."""
    hidden_size: int = Field(128, ge=8, le=4096)
    """Qwen2 hidden size."""
    num_layers: int = Field(2, ge=1, le=64)
    """Qwen2 decoder layers."""
    num_heads: int = Field(4, ge=1, le=64)
    """Attention heads."""
    train_games: int = Field(48, ge=1, le=100_000)
    """Generated games on which the searching expert is demonstrated (behaviour-cloning data)."""
    passes: int = Field(2, ge=1, le=1000)
    """Demonstration episodes per training game (each with its own search draws and mistakes)."""
    noise_rate: float = Field(0.25, ge=0.0, le=1.0)
    """Probability of injecting a mistake at a demonstration step."""
    epochs: int = Field(3, ge=1, le=1000)
    """Behaviour-cloning epochs."""
    decisive_repeats: int = Field(6, ge=1, le=100)
    """Times per epoch each example whose action handles an object (take, move, heat, cool,
    clean, slice, use) is shown; the searching ``go to`` steps dominate the data otherwise."""
    augment_share: float = Field(0.8, ge=0.0, le=1.0)
    """Share of the examples shown with object names and instance numbers consistently renamed
    (from the second epoch on; 0 turns the augmentation off), so the network learns to copy
    names from its prompt instead of memorising them."""
    learning_rate: float = Field(3e-3, gt=0.0, le=1.0)
    """AdamW learning rate."""
    goal_variants: Annotated[int, ADDED_LATER] = Field(4, ge=0, le=32)
    """Relabelled goals trained beside each demonstration step (0 turns it off): the searching
    expert labels the same state under a goal naming another object in view, an absent object,
    another receptacle or another task kind, and the variants share the step's prompt prefix in
    one packed row (recipe v4)."""
    search_targets: Annotated[Literal["draw", "distribution"], ADDED_LATER] = "distribution"
    """What a searching ``go to`` step is trained against: ``distribution``, the expert's whole
    distribution over the places it searches (soft targets: every place it would never go back
    to has probability 0, every place that can hold the object the same share; recipe v5);
    ``draw``, its one random draw (recipe v4)."""
    train_dtype: Annotated[Literal["float32", "bfloat16"], ADDED_LATER] = "bfloat16"
    """Compute dtype of the training passes (CPU autocast; the weights stay float32): bfloat16
    trains about a fifth faster on a CPU with native bfloat16 (AVX512-BF16, AMX) and is as
    reproducible; choose float32 on one without."""


class PolicyServer(_Model):
    """An OpenAI-compatible inference server that serves the policy (``policy.source: openai``).

    The server computes what the in-process backend computes (token log-probabilities of given
    actions, seeded draws); the tokenizer and chat template still come from ``policy.path``, whose
    files are pinned as for ``local``. A server batches requests as it likes, and batched GPU
    arithmetic is not bit-reproducible across batch shapes: numbers agree with the in-process
    backend to float rounding, not bit for bit (:attr:`bit_reproducible`, recorded in the lock).
    The ledger regenerates its numbers from the stored artifacts and never re-runs the policy.

    The protocol id holds what the server computes (``model``, ``served``), not where or how
    requests reach it: the endpoint, key variable, concurrency, batching, retries and timeout are
    recorded in the lock but a run can move to another host without changing its id (or seeds).
    """

    endpoint: Annotated[str, NON_IDENTITY] = Field(pattern=r"^https?://\S+$", max_length=2048)
    """Base URL of the OpenAI-compatible API, e.g. ``http://127.0.0.1:8000/v1``."""
    model: str = Field(min_length=1, max_length=512)
    """The served model's name, as ``GET /v1/models`` lists it (refused when the server lists
    another)."""
    api_key_env: Annotated[str | None, NON_IDENTITY] = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Name of the environment variable holding the API key (the key itself is never recorded);
    null for a server without authentication."""
    served: dict[str, Any] = Field(default_factory=dict)
    """What ``GET /v1/models`` reports for :attr:`model` (its ``id``, ``object``, ``owned_by``,
    ``root``, ``parent``, ``max_model_len`` where given: vLLM's ``root`` is the served directory or
    hub revision); copy it from a run's ``policy_server.json`` (``served``) before freezing. When
    set, a server reporting anything else is refused; empty pins the name only."""
    max_concurrency: Annotated[int, NON_IDENTITY] = Field(4, ge=1, le=1024)
    """Requests in flight at once."""
    batch_size: Annotated[int, NON_IDENTITY] = Field(16, ge=1, le=4096)
    """Rows per request (servers that take a list of token-id prompts; others get one per request)."""
    max_retries: Annotated[int, NON_IDENTITY] = Field(5, ge=0, le=100)
    """Retries of a failed request (connection errors, 408/409/429/5xx), with exponential backoff
    that honours ``Retry-After``."""
    timeout_s: Annotated[float, NON_IDENTITY] = Field(120.0, gt=0.0, le=3600.0)
    """Seconds before one request is abandoned (then retried)."""
    bit_reproducible: Literal[False] = False
    """Always false: a server backend is not bit-reproducible across batch shapes."""


class PolicySection(_Model):
    """The policy under audit. Its files are inputs: their hashes are pinned before freezing."""

    source: Literal["builtin", "local", "openai"] = "builtin"
    """``builtin``: the embedded default policy built by ``creditaudit policy build``; ``local``: any
    causal LM directory ``from_pretrained`` loads (Qwen2.5, Llama 3.1 ...); ``openai``: the model in
    ``path`` served by an OpenAI-compatible server (:class:`PolicyServer`, section ``server``)."""
    path: str = "policy"
    """Model directory, relative to the protocol file's directory unless absolute; or
    ``hf://ORG/NAME@REVISION``, a checkpoint in the local Hugging Face cache (never downloaded;
    ``protocol pin`` replaces a branch or tag by its commit, and freezing needs a commit —
    :mod:`creditaudit.protocol.hub`)."""
    server: Annotated[PolicyServer | None, ADDED_LATER] = None
    """The inference server (``source: openai`` only)."""
    model_files: dict[str, Sha256] = Field(default_factory=dict)
    """SHA-256 of every model file (config and weights), by file name; filled by ``protocol init
    --policy DIR``. Freezing refuses an empty map."""
    tokenizer_files: dict[str, Sha256] = Field(default_factory=dict)
    """SHA-256 of every tokenizer file, by file name."""
    chat_template_sha256: Sha256 | None = None
    """SHA-256 of the tokenizer's chat template text (null when it has none)."""
    build: PolicyBuild = Field(default_factory=PolicyBuild)
    """Build configuration (``source: builtin`` only)."""
    temperature: float = Field(0.7, gt=0.0, le=10.0)
    """Sampling temperature of rollouts."""
    history_length: int = Field(2, ge=0, le=100)
    """Past (observation, action) turns shown in the prompt."""
    list_admissible: Annotated[bool, ADDED_LATER] = True
    """List the admissible commands in the prompt. False leaves the line out, for an environment
    whose states offer hundreds of commands (ScienceWorld: up to ~1,000, most of a prompt's tokens);
    under ``decoding: admissible`` or ``constrained`` the policy still draws among them."""
    max_action_tokens: int = Field(12, ge=1, le=256)
    """Maximum generated tokens per action."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Compute dtype."""
    decoding: Literal["free", "admissible", "constrained"] = "admissible"
    """``admissible`` (default): the action is drawn from the policy's own distribution restricted
    to the admissible commands (whole-command log-probabilities tempered by T; the embedded default
    policy is built for it); ``constrained``: the action is generated token by token at
    temperature T with every token that continues no admissible command masked out (the verb is
    then chosen before the object, and a small model that cannot tell at the verb whether the
    task's object is in view takes whatever is there); ``free``: the policy generates the action
    text (inadmissible text gets the engine's "Nothing happens."; the papers' setting for
    Qwen-7B-class policies)."""

    @model_validator(mode="after")
    def _server_iff_openai(self) -> PolicySection:
        from creditaudit.errors import InputError
        from creditaudit.protocol.hub import is_hub_path, parse_hub_path

        if is_hub_path(self.path):
            if self.source == "builtin":
                raise ValueError(f"policy.path {self.path!r} names a hub checkpoint but policy.source is 'builtin' "
                                 "(built into a directory): set source: local (or openai)")
            try:
                parse_hub_path(self.path)
            except InputError as exc:
                raise ValueError(str(exc)) from None
        if self.source == "openai" and self.server is None:
            raise ValueError("policy.source is 'openai': set policy.server (endpoint, model)")
        if self.source != "openai" and self.server is not None:
            raise ValueError(f"policy.server is set but policy.source is {self.source!r}: set source: openai")
        return self


class ComputeSection(_Model):
    """Where replay's work runs on a Ray cluster (``creditaudit replay --executor ray``): resources
    only, never what is computed, so nothing here enters the protocol id; the lock records it.

    On Ray, environment workers are CPU actors and the policy is one service that they all send
    their requests to: for ``policy.source: openai`` the inference server itself, otherwise one
    Ray actor holding the in-process model (:mod:`creditaudit.replay.policy_service`).
    """

    policy_gpus: Annotated[float, NON_IDENTITY] = Field(0.0, ge=0.0, le=64.0)
    """GPUs of the policy-service actor (Ray ``num_gpus``; in-process backends). A cluster with
    fewer is refused before any work starts."""
    policy_cpus: Annotated[float, NON_IDENTITY] = Field(1.0, gt=0.0, le=1024.0)
    """CPUs of the policy-service actor (Ray ``num_cpus``)."""
    worker_cpus: Annotated[float, NON_IDENTITY] = Field(1.0, gt=0.0, le=1024.0)
    """CPUs of each environment-worker actor (Ray ``num_cpus``)."""
    merge_requests: Annotated[bool, NON_IDENTITY] = False
    """``false`` (default): the service computes each worker's request as its own batch, exactly
    as that worker would in process, so results are byte-identical to the local executor.
    ``true``: requests pending at the same moment from different workers (same method and
    settings) are concatenated into shared forward passes -- larger batches for a GPU, but a row's
    last bits then depend on which requests met (float rounding, as with a server backend), so the
    run is not bit-reproducible."""


# --------------------------------------------------------------------------- collection, replay


class CollectionSection(_Model):
    """Trajectory collection on the frozen task list."""

    n_tasks: int = Field(24, ge=1, le=1_000_000)
    """Tasks sampled (without replacement) from the task list with stream ``collect/tasks``."""
    group_size: int = Field(8, ge=1, le=1024)
    """Rollouts per task (G): ProVer/VICT and the group-relative base advantages need G > 1."""
    determinism_instances: int = Field(3, ge=2, le=32)
    """Independent environment instances on which one trajectory's hash is checked before collection."""


class ReplaySection(_Model):
    """Executed counterfactual replay (SPEC.md §3)."""

    n_fact: int = Field(3, ge=3, le=1000)
    """Seeded re-executions of the factual action, each rolled out to the end."""
    n_alternatives: int = Field(4, ge=1, le=64)
    """K: distinct admissible alternatives (other than the factual action) per turn."""
    n_alt: int = Field(3, ge=3, le=1000)
    """Rollouts per alternative action."""
    alt_temperature: float = Field(0.7, gt=0.0, le=10.0)
    """Temperature at which alternatives are drawn from the same policy snapshot."""
    max_alt_draws: int = Field(300, ge=1, le=100_000)
    """Seeded draws allowed to find K distinct admissible alternatives; else no counterfactual."""
    max_rollouts_per_turn: int = Field(64, ge=1, le=100_000)
    """Replay budget per turn; a turn needing more is incomplete."""
    resolution_alpha: float = Field(0.05, gt=0.0, lt=1.0)
    """One-sided level of the resolution bound ``1 - alpha**(1/n)`` for all-equal arms."""
    turns_per_trajectory: Annotated[int | None, ADDED_LATER] = Field(None, ge=1, le=10_000)
    """Preregistered turn sampling: replay only this many turns of each trajectory, drawn without
    replacement, before any replay, from the seed stream ``replay/<trajectory>/sample`` (a function of
    the protocol id and the trajectory's length only); the others get status ``not_sampled`` and
    every statistic is computed on the sampled turns. Null replays every turn."""


# --------------------------------------------------------------------------- signals


def _plugin(kind: str, name: str):
    from creditaudit import plugins

    return plugins.get(kind, name)


class SignalSpec(_Model):
    """One audited credit family: the protocol's name for it, the registered family it is, and the
    family's arguments (validated against its factory's signature, defaults applied, so the frozen
    protocol holds every constant)."""

    name: Name
    """Unique name of this credit family in the audit; gates and controls refer to it. Nothing a
    statistic or a verdict rests on depends on it."""
    family: Name
    """The registered family (entry-point group ``creditaudit.families``): a built-in
    (``implicit``, ``judge``, ``confidence``, ``prover``, ``vict``, ``gigpo``, ``grpo``, ``rloo``,
    ``precomputed``) or a third party's."""
    args: dict[str, Any] = Field(default_factory=dict)
    """The family's constants, by its factory's parameter names."""
    description: FreeText = ""
    """Free text; not part of the protocol id."""

    @model_validator(mode="before")
    @classmethod
    def _bind_args(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("family"), str):
            return data
        where = f"signal {data.get('name')!r}"
        plugin = _plugin("family", data["family"])
        args = data.get("args", {})
        if not isinstance(args, dict):
            raise ValueError(f"{where}: `args` must be a mapping of the family's arguments")
        bound = plugin.bind(args, where=f"{where}: args")
        family = plugin.create(bound, name=str(data.get("name")))  # the family's own cross-argument checks
        from creditaudit.signals.base import check_contract

        check_contract(family, source=f"{where}: family {data['family']!r} ({plugin.distribution} {plugin.version})")
        return {**data, "args": bound}


class ControlSpec(_Model):
    """A control credit: null (random, uniform) or derived from a family (shuffle, inverted)."""

    name: Name
    """Unique name; gates refer to it as ``control:<name>``."""
    kind: Literal["random", "uniform", "shuffle", "inverted"]
    """random: i.i.d. N(0, 1) per turn; uniform: i.i.d. Uniform(-1, 1) per turn; shuffle: a
    within-trajectory permutation of the family (marginal-matched, seeded); inverted: minus the
    family's credit."""
    of: Name | None = None
    """The family a shuffle or inverted control derives from."""
    null_control: bool = False
    """Whether this control must show no effect for the instrument to be valid (controls gate)."""
    description: FreeText = ""
    """Free text; not part of the protocol id."""

    @model_validator(mode="after")
    def _check_of(self) -> "ControlSpec":
        if self.kind in ("shuffle", "inverted") and self.of is None:
            raise ValueError(f"`of` must name a family for a {self.kind} control")
        if self.kind in ("random", "uniform") and self.of is not None:
            raise ValueError(f"`of` must be empty for a {self.kind} control")
        return self


class RouterSection(_Model):
    """The confidence router: send the lowest-confidence turns to the judge (SPEC.md §4).

    The threshold is the order statistic of the policy's own confidence that makes the routed
    share equal ``routed_share``; the router is always reported with its recall of pivotal turns
    (its negative result in the paper: recall at chance) beside the judge calls it saves.
    """

    confidence_family: Name = "confidence"
    """Family whose credit is the policy's confidence."""
    judge_family: Name = "judge"
    """Family the routed turns are sent to."""
    routed_share: float = Field(0.87, gt=0.0, le=1.0)
    """Share of turns routed to the judge (the paper's router skipped ~13% of turns)."""


# --------------------------------------------------------------------------- statistics


class StatisticsSection(_Model):
    """Statistical conventions, fixed here and recorded in every result."""

    bootstrap_iterations: int = Field(10_000, ge=100, le=10_000_000)
    """Cluster (trajectory) bootstrap resamples."""
    ci_level: float = Field(0.95, gt=0.5, lt=1.0)
    """Two-sided confidence level of every interval."""
    bootstrap_method: Literal["percentile"] = "percentile"
    """Bootstrap interval method."""
    spearman_constant: Literal["exclude"] = "exclude"
    """A trajectory whose credit or A_replay is constant has no rank information: it is excluded
    from that family's median and counted."""
    alpha: float = Field(0.05, gt=0.0, lt=1.0)
    """Family-wise error rate of the confirmatory tests."""
    multiplicity: Literal["holm"] = "holm"
    """Correction across the confirmatory tests."""
    equivalence_band: float = Field(0.03, gt=0.0, lt=1.0)
    """TOST band in raw success-rate units (0.03 = +-3 pp)."""
    power: float = Field(0.8, gt=0.0, lt=1.0)
    """Power for the design minimum detectable effect."""
    permutations: int = Field(10_000, ge=99, le=10_000_000)
    """Permutations of every permutation test."""
    mantel_method: Literal["pearson", "spearman"] = "pearson"
    """Correlation of the (partial) Mantel test."""
    mantel_alternative: Literal["greater", "less", "two-sided"] = "greater"
    """Sidedness of the (partial) Mantel test (vegan's mantel.partial is one-sided 'greater')."""
    js_log_base: float = Field(2.0, gt=1.0)
    """Log base of the Jensen-Shannon divergence."""
    top_k_fraction: float = Field(0.2, gt=0.0, le=1.0)
    """Share of each trajectory's turns taken as 'top credited' for precision-at-pivotal."""


class ExclusionSection(_Model):
    """Preregistered exclusion rules."""

    min_complete_turns: int = Field(4, ge=1)
    """A trajectory with fewer complete turns is degenerate (excluded from every family, counted)."""
    exclude_constant_replay: bool = True
    """A trajectory with constant A_replay is degenerate."""
    min_trajectories: int = Field(20, ge=1)
    """INFEASIBLE below this many included trajectories."""
    min_pivotal_turns: int = Field(30, ge=1)
    """INFEASIBLE below this many pivotal turns."""
    format_collapse_threshold: float = Field(0.5, gt=0.0, le=1.0)
    """A checkpoint whose share of unparseable actions exceeds this is excluded (and reported)."""


# --------------------------------------------------------------------------- predicates and gates

_SUBJECT = re.compile(r"^(self|shuffle\(self\)|inverted\(self\)|control:[a-z][a-z0-9_\-]*|family:[a-z][a-z0-9_\-]*)$")
Subject = Annotated[str, Field(pattern=_SUBJECT.pattern)]


class Compare(_Model):
    """``stat(of) cmp value``: compare a statistic of a subject with a constant."""

    stat: str
    """Statistic name (one of the audit's statistics)."""
    of: Subject = "self"
    """Subject: ``self``, ``shuffle(self)``, ``inverted(self)``, ``control:<name>``, ``family:<name>``."""
    cmp: Literal["<", "<=", ">", ">=", "==", "!="]
    """Comparator."""
    value: float
    """Threshold."""

    @field_validator("value")
    @classmethod
    def _finite_value(cls, v: float) -> float:
        return _finite(v, "value")


class AllOf(_Model):
    """True when every member is true."""

    all: list["Predicate"] = Field(min_length=1)


class AnyOf(_Model):
    """True when at least one member is true."""

    any: list["Predicate"] = Field(min_length=1)


class Not(_Model):
    """Negation."""

    not_: "Predicate" = Field(alias="not")

    model_config = ConfigDict(populate_by_name=False)


class Overlaps(_Model):
    """True when the CIs ``[ci_low, ci_high]`` of two subjects intersect."""

    overlaps: list[Subject] = Field(min_length=2, max_length=2)


class ContainsSpec(_Model):
    of: Subject
    """Subject whose CI is tested."""
    value: float = 0.0
    """The value the interval must contain."""


class Contains(_Model):
    """True when the CI of a subject contains a value."""

    contains: ContainsSpec


class Always(_Model):
    """Always true: the catch-all last gate."""

    always: Literal[True]


def _predicate_tag(value: Any) -> str | None:
    if isinstance(value, BaseModel):
        return type(value).__name__
    if isinstance(value, dict):
        for key, tag in (
            ("stat", "Compare"),
            ("all", "AllOf"),
            ("any", "AnyOf"),
            ("not", "Not"),
            ("overlaps", "Overlaps"),
            ("contains", "Contains"),
            ("always", "Always"),
        ):
            if key in value:
                return tag
    return None


Predicate = Annotated[
    Union[
        Annotated[Compare, Tag("Compare")],
        Annotated[AllOf, Tag("AllOf")],
        Annotated[AnyOf, Tag("AnyOf")],
        Annotated[Not, Tag("Not")],
        Annotated[Overlaps, Tag("Overlaps")],
        Annotated[Contains, Tag("Contains")],
        Annotated[Always, Tag("Always")],
    ],
    Discriminator(
        _predicate_tag,
        custom_error_type="invalid_predicate",
        custom_error_message="a predicate is a mapping with one of the keys stat/all/any/not/overlaps/contains/always",
    ),
]

AllOf.model_rebuild()
AnyOf.model_rebuild()
Not.model_rebuild()


class Gate(_Model):
    """One gate of the decision order: when its predicate is true, it decides ``verdict``."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_\-]*$")]
    """Gate id used in ``decision_order``."""
    kind: Literal["controls", "feasibility", "effect"]
    """controls and feasibility gates must precede every effect gate."""
    verdict: Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]*$")]
    """Verdict recorded when the gate fires."""
    when: Predicate
    """Structured predicate (never evaluated Python)."""
    description: FreeText = ""
    """Free text; not part of the protocol id."""


def _default_gates() -> list[Gate]:
    return [
        Gate(
            id="Controls",
            kind="controls",
            verdict="INSTRUMENT_INVALID",
            when=Not.model_validate(
                {"not": {"all": [{"contains": {"of": "control:random", "value": 0.0}},
                                 {"contains": {"of": "control:uniform", "value": 0.0}}]}}
            ),
        ),
        Gate(
            id="INFEASIBLE",
            kind="feasibility",
            verdict="INFEASIBLE",
            when=AnyOf.model_validate(
                {"any": [{"stat": "n_trajectories", "of": "self", "cmp": "<", "value": 20.0},
                         {"stat": "n_pivotal_turns", "of": "self", "cmp": "<", "value": 30.0}]}
            ),
        ),
        Gate(id="H3", kind="effect", verdict="H3_PLACEBO", when=Overlaps(overlaps=["self", "shuffle(self)"])),
        Gate(
            id="H2",
            kind="effect",
            verdict="H2_REVERSED",
            when=AllOf.model_validate(
                {"all": [{"stat": "ci_high", "of": "self", "cmp": "<", "value": 0.0},
                         {"not": {"overlaps": ["self", "shuffle(self)"]}}]}
            ),
        ),
        Gate(id="H1", kind="effect", verdict="H1_TRACKS", when=Compare(stat="ci_low", of="self", cmp=">=", value=0.3)),
        Gate(id="H4", kind="effect", verdict="H4_WEAK", when=Always(always=True)),
    ]


class HypothesesSection(_Model):
    """The gates, their frozen decision order and the confirmatory tests."""

    gates: list[Gate] = Field(default_factory=_default_gates, min_length=1)
    """Gate definitions."""
    decision_order: list[str] = Field(
        default_factory=lambda: ["Controls", "INFEASIBLE", "H3", "H2", "H1", "H4"], min_length=1
    )
    """Order in which gates are evaluated; the first that fires decides."""
    confirmatory: list[Name] = Field(default_factory=list)
    """Families whose primary test enters the Holm correction (empty = every audited family)."""

    @model_validator(mode="after")
    def _check_order(self) -> "HypothesesSection":
        ids = [g.id for g in self.gates]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"gate ids must be unique; repeated: {', '.join(dupes)}")
        order = list(self.decision_order)
        repeated = sorted({i for i in order if order.count(i) > 1})
        if repeated:
            raise ValueError(f"`decision_order` repeats {', '.join(repeated)}")
        unknown = [i for i in order if i not in ids]
        if unknown:
            raise ValueError(f"`decision_order` names unknown gates: {', '.join(unknown)}")
        missing = [i for i in ids if i not in order]
        if missing:
            raise ValueError(f"`decision_order` omits gates: {', '.join(missing)}")
        kinds = {g.id: g.kind for g in self.gates}
        if "controls" not in kinds.values():
            raise ValueError("the decision order needs a `controls` gate")
        if "feasibility" not in kinds.values():
            raise ValueError("the decision order needs a `feasibility` (INFEASIBLE) gate")
        first_effect = next((k for k, i in enumerate(order) if kinds[i] == "effect"), None)
        if first_effect is not None:
            late = [i for i in order[first_effect:] if kinds[i] != "effect"]
            if late:
                raise ValueError(
                    f"`decision_order`: gate(s) {', '.join(late)} of kind controls/feasibility come after "
                    f"effect gate {order[first_effect]}; the controls gate and INFEASIBLE must precede every effect gate"
                )
        for gate in self.gates:
            for stat in _predicate_stats(gate.when):
                if stat not in AUDIT_STATISTICS:
                    raise ValueError(
                        f"gate {gate.id}: statistic {stat!r} is not produced by the audit; "
                        f"one of {sorted(AUDIT_STATISTICS)}"
                    )
        return self


def _predicate_stats(pred: Any) -> list[str]:
    if isinstance(pred, Compare):
        return [pred.stat]
    if isinstance(pred, (Overlaps, Contains)):
        return ["ci_low", "ci_high"]
    if isinstance(pred, AllOf):
        return [s for p in pred.all for s in _predicate_stats(p)]
    if isinstance(pred, AnyOf):
        return [s for p in pred.any for s in _predicate_stats(p)]
    if isinstance(pred, Not):
        return _predicate_stats(pred.not_)
    return []


def predicate_subjects(pred: Any) -> list[str]:
    """Every subject a predicate refers to."""
    if isinstance(pred, Compare):
        return [pred.of]
    if isinstance(pred, Overlaps):
        return list(pred.overlaps)
    if isinstance(pred, Contains):
        return [pred.contains.of]
    if isinstance(pred, AllOf):
        return [s for p in pred.all for s in predicate_subjects(p)]
    if isinstance(pred, AnyOf):
        return [s for p in pred.any for s in predicate_subjects(p)]
    if isinstance(pred, Not):
        return predicate_subjects(pred.not_)
    return []


# --------------------------------------------------------------------------- training arms


class ArmsSection(_Model):
    """The seven-arm common-random-numbers LoRA experiment (SPEC.md §6)."""

    arms: list[Name] = Field(
        default_factory=lambda: [
            "outcome_only",
            "implicit",
            "judge",
            "shuffled_implicit",
            "shuffled_judge",
            "inverted_implicit",
            "pivotal_masked",
        ],
        min_length=1,
    )
    """Arms trained, by their registered credit rule (entry-point group ``creditaudit.arm_rules``);
    credit enters as per-turn weights on the GRPO advantage."""

    @field_validator("arms")
    @classmethod
    def _known_arms(cls, values: list) -> list:
        for name in _no_repeats(values):
            _plugin("arm_rule", name)
        return values

    seeds: int = Field(2, ge=1, le=100)
    """Seed indices per arm (common random numbers: same task order, sampling and LoRA init per index)."""
    rounds: int = Field(3, ge=1, le=10_000)
    """Collect-then-update rounds."""
    tasks_per_round: int = Field(8, ge=1)
    """Training tasks per round."""
    group_size: int = Field(4, ge=2)
    """Rollouts per task per round (GRPO group)."""
    lora_rank: int = Field(8, ge=1)
    """LoRA rank."""
    lora_alpha: float = Field(16.0, gt=0.0)
    """LoRA alpha."""
    learning_rate: float = Field(1e-3, gt=0.0)
    """Optimizer learning rate."""
    minibatch_size: int = Field(16, ge=1)
    """Kept turn samples per optimizer step: an arm's natural dose in a round is
    ``ceil(kept samples / minibatch_size)`` steps (zero-weight samples are dropped first)."""
    dose_matched: bool = False
    """Equalise optimizer steps across arms."""
    eval_tasks: int = Field(32, ge=1)
    """Size of the frozen held-out evaluation set (the paper: 128)."""
    eval_rollouts: Annotated[int, ADDED_LATER] = Field(1, ge=1, le=1000)
    """Evaluation rollouts per task and checkpoint, on the held-out set and on the training tasks
    (common random numbers: rollout ``r`` of task ``k`` samples with the same seeds for every
    checkpoint). More than 1 makes a small task set measurable: a task's success becomes a rate."""
    probe_states: int = Field(64, ge=1)
    """Fixed probe states on which every checkpoint's action distribution is measured."""
    pivotal_resolution_n: int = Field(1, ge=1)
    """Rollouts per arm of the low-resolution replay that defines the pivotal-masked arm."""


# --------------------------------------------------------------------------- protocol


class PluginPin(_Model):
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


class Protocol(_Model):
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
            family = _plugin("family", spec.family).create(spec.args, name=spec.name)
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
