"""creditaudit.signals — per-turn credit from every family the protocol names, and its controls.

Families are plugins (:mod:`creditaudit.plugins`, entry-point group ``creditaudit.families``) whose arguments are the protocol's
constants: ``implicit`` (HCAPO rho_t, :mod:`~creditaudit.signals.families.implicit`), ``judge`` (TARL,
:mod:`~creditaudit.signals.families.judge`), ``confidence`` (:mod:`~creditaudit.signals.families.confidence`),
``grpo``/``rloo`` (:mod:`~creditaudit.signals.families.advantages`), ``prover`` (ProVer,
:mod:`~creditaudit.signals.families.prover`), ``vict`` (VICT on ALFWorld, :mod:`~creditaudit.signals.families.vict` over
the instrumentation in :mod:`~creditaudit.signals.families.vict.atoms`). Controls are in
:mod:`~creditaudit.signals.controls`, the confidence router in :mod:`~creditaudit.signals.router`,
and the stage (``creditaudit signals``) in :mod:`~creditaudit.signals.stage`.
"""

from creditaudit.signals.families.advantages import grpo_advantages, rloo_advantages, zscore
from creditaudit.signals.base import (
    ABSTAIN_REASONS,
    CREDIT_SCHEMA,
    FAMILY_CONTRACT_VERSION,
    CreditFamily,
    FamilyBase,
    FamilyOutput,
    SignalContext,
    Trajectory,
    TurnRecord,
    check_contract,
    credit_frame,
    implemented_families,
    make_family,
    trajectories_from_table,
)
from creditaudit.signals.families.confidence import geometric_mean_probability
from creditaudit.signals.families.prover import (
    ProverFamily,
    candidate_segments,
    is_eligible,
    proposer_table,
    segment_estimate,
)
from creditaudit.signals.families.vict.family import VictFamily, exhaustive_core, greedy_core, robust_normalise, vict_group
from creditaudit.signals.families.vict.atoms import instrument as vict_instrument
from creditaudit.signals.controls import changed_share, inverted_control, null_control, shuffle_control, shuffle_values
from creditaudit.signals.families.implicit import (
    HCAPOAdvantage,
    backward_smoothing,
    hcapo_advantages,
    hcapo_q_values,
    hindsight_prompts,
    hindsight_ratio,
    multiscale_advantage,
    pi_hind,
)
from creditaudit.signals.families.judge import (
    JUDGE_CHOICES,
    JudgeVerdict,
    LocalJudge,
    MalformedAnswer,
    check_choices,
    constrained_scores,
    judge_agreement,
    judge_prompt,
    parse_judge_answer,
)
from creditaudit.signals.families.judge_http import HttpJudge
from creditaudit.signals.router import route, router_report
from creditaudit.signals.stage import CREDIT, DIAGNOSTICS_DIR, SUMMARY, SignalsSummary, read_credit, run_signals

__all__ = [
    # the stage
    "CREDIT",
    "SUMMARY",
    "DIAGNOSTICS_DIR",
    "CREDIT_SCHEMA",
    "SignalsSummary",
    "run_signals",
    "read_credit",
    # the family contract (version FAMILY_CONTRACT_VERSION; creditaudit.signals.base)
    "FAMILY_CONTRACT_VERSION",
    "ABSTAIN_REASONS",
    "CreditFamily",
    "FamilyBase",
    "FamilyOutput",
    "credit_frame",
    "check_contract",
    "SignalContext",
    "Trajectory",
    "TurnRecord",
    "implemented_families",
    "make_family",
    "trajectories_from_table",
    # implicit (HCAPO)
    "pi_hind",
    "hindsight_ratio",
    "hindsight_prompts",
    "hcapo_q_values",
    "backward_smoothing",
    "multiscale_advantage",
    "hcapo_advantages",
    "HCAPOAdvantage",
    # judge (TARL)
    "JUDGE_CHOICES",
    "judge_prompt",
    "check_choices",
    "constrained_scores",
    "parse_judge_answer",
    "MalformedAnswer",
    "JudgeVerdict",
    "LocalJudge",
    "HttpJudge",
    "judge_agreement",
    # confidence and base advantages
    "geometric_mean_probability",
    "grpo_advantages",
    "rloo_advantages",
    "zscore",
    # ProVer
    "ProverFamily",
    "candidate_segments",
    "is_eligible",
    "proposer_table",
    "segment_estimate",
    # VICT
    "VictFamily",
    "vict_group",
    "greedy_core",
    "exhaustive_core",
    "robust_normalise",
    "vict_instrument",
    # controls and router
    "null_control",
    "shuffle_control",
    "inverted_control",
    "shuffle_values",
    "changed_share",
    "route",
    "router_report",
]
