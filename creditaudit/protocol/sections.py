"""The protocol's sections (docs/design.md §1): environment, policy, compute, collection, replay,
signals and controls, statistics, exclusions, training arms. The gates are :mod:`.gates`; the
protocol that holds them all is :mod:`.schema`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from creditaudit.protocol.fields import (
    TASK_TYPES,
    NON_IDENTITY,
    ADDED_LATER,
    FreeText,
    Sha256,
    Name,
    StrictModel,
    no_repeats,
    resolve_plugin,
)

__all__ = ["EnvironmentSection", "GeneratorSettings", "GameFile", "PolicySection", "PolicyServer", "PolicyBuild", "ComputeSection", "CollectionSection", "ReplaySection", "SignalSpec", "ControlSpec", "RouterSection", "StatisticsSection", "ExclusionSection", "ArmsSection"]

# --------------------------------------------------------------------------- environment


class GeneratorSettings(StrictModel):
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
        return no_repeats(values)


class GameFile(StrictModel):
    """A user-supplied game file: an input, pinned by content hash before freezing."""

    path: str
    """Path relative to the environment's data directory."""
    sha256: Sha256
    """SHA-256 of the game file's bytes."""
    task_type: Literal[TASK_TYPES]  # type: ignore[valid-type]
    """ALFWorld task type of the game."""


class EnvironmentSection(StrictModel):
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
        plugin = resolve_plugin("environment", name)
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
        return resolve_plugin("environment", self.name).create(self.args, horizon=self.horizon)

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


class PolicyBuild(StrictModel):
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


class PolicyServer(StrictModel):
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


class PolicySection(StrictModel):
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


class ComputeSection(StrictModel):
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


class CollectionSection(StrictModel):
    """Trajectory collection on the frozen task list."""

    n_tasks: int = Field(24, ge=1, le=1_000_000)
    """Tasks sampled (without replacement) from the task list with stream ``collect/tasks``."""
    group_size: int = Field(8, ge=1, le=1024)
    """Rollouts per task (G): ProVer/VICT and the group-relative base advantages need G > 1."""
    determinism_instances: int = Field(3, ge=2, le=32)
    """Independent environment instances on which one trajectory's hash is checked before collection."""


class ReplaySection(StrictModel):
    """Executed counterfactual replay (docs/design.md §3)."""

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


class SignalSpec(StrictModel):
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
        plugin = resolve_plugin("family", data["family"])
        args = data.get("args", {})
        if not isinstance(args, dict):
            raise ValueError(f"{where}: `args` must be a mapping of the family's arguments")
        bound = plugin.bind(args, where=f"{where}: args")
        family = plugin.create(bound, name=str(data.get("name")))  # the family's own cross-argument checks
        from creditaudit.signals.base import check_contract

        check_contract(family, source=f"{where}: family {data['family']!r} ({plugin.distribution} {plugin.version})")
        return {**data, "args": bound}


class ControlSpec(StrictModel):
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


class RouterSection(StrictModel):
    """The confidence router: send the lowest-confidence turns to the judge (docs/design.md §4).

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


class StatisticsSection(StrictModel):
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


class ExclusionSection(StrictModel):
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




# --------------------------------------------------------------------------- training arms


class ArmsSection(StrictModel):
    """The seven-arm common-random-numbers LoRA experiment (docs/design.md §6)."""

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
        for name in no_repeats(values):
            resolve_plugin("arm_rule", name)
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


