"""The embedded default policy: a tiny Qwen2 model trained here by behaviour cloning.

The recipe, by stage: :mod:`~.vocabulary` (words and the word-level tokenizer),
:mod:`~.model` (the network), :mod:`~.demonstrations` (the noisy searching expert),
:mod:`~.augmentation` (renaming, goal relabelling), :mod:`~.targets` (soft search targets),
:mod:`~.training` (the behaviour-cloning loop), :mod:`~.evaluation` (held-out success) and
:mod:`~.build` (:func:`build_default_policy`, which runs them from one seed).

The toolkit must run an audit end to end on a machine without a GPU and without any download,
so it ships the recipe for a policy, not the policy: a word-level tokenizer built over the
ALFWorld vocabulary and a tiny ``Qwen2ForCausalLM`` trained on noisy demonstrations of an
observation-only searching expert on generated games. The result is an ordinary Hugging Face
model directory (``save_pretrained``) that :func:`creditaudit.replay.policies.hf.load_policy` loads
like any other model.

The build is reproducible from its seed: every random choice (game order, the expert's search
draws, injected mistakes, weight initialisation, data order) comes from a named stream of the
build seed, training runs with deterministic algorithms at a fixed thread count, and the same
seed gives byte-identical weight files.

The demonstrator
----------------
A planner's walkthrough knows where every object lies; a policy that reads only the game's text
cannot, and cloning such walkthroughs taught the first version of this policy to guess (0 of 24
held-out games won). The demonstrator is instead :func:`creditaudit.replay.envs.alfworld.expert.expert_action`,
which decides from exactly what a prompt shows (goal, observation, admissible commands, two turns
of history) and searches for objects by drawing receptacles that can hold them. Its search draws
are where the policy's own randomness, and so its failures, come from.

Mistakes
--------
At each step, with probability ``noise_rate`` (at most twice in a row), a mistake is injected
that does not make the task impossible: half of the time an inadmissible variant of the expert's
command (the engine answers "Nothing happens." and nothing changes), otherwise a wrong admissible
``go to``, ``examine`` or ``open``. The expert then acts from the state the mistake produced.
Mistaken actions appear in later prompts' history but are never training targets (their loss is
masked): the policy learns to recover from states off the expert path (DART-style noise
injection) without learning to imitate deliberate errors.

Loss
----
Cross-entropy on the action tokens and ``<eoa>`` only (``context_weight = 0``; an auxiliary
next-token loss on the prompt tokens is kept for experiments). Three choices make the policy
succeed at all on held-out games:

* the examples that handle an object (take, move, heat ...; a tenth of the data, and what every
  task turns on) are shown ``decisive_repeats`` times an epoch;
* from the second epoch on a share ``augment_share`` of the examples have their object names and
  instance numbers consistently renamed (:func:`rename_entities`), so the network must copy
  "watch 1" from its prompt instead of memorising which objects are taken;
* (v4) every step is trained beside ``goal_variants`` relabelled goals (:func:`relabel_goal`): the
  expert is a pure function of the prompt, so the same state is labelled under a goal naming
  another object in view (``take`` it), an absent one (search on), another receptacle or another
  task kind (another appliance, or none). A demonstration shows each of these decisions a few
  dozen times; the variants make minimal pairs in which the goal alone decides. They share the
  step's prompt prefix in one packed row, each attending to the prefix and to itself only, so a
  variant costs its own ~15 tokens, not a whole prompt;
* (v5) a searching ``go to`` step is trained against the expert's whole distribution over the
  places it searches (:func:`expert_search`), not against its one draw: soft targets on the
  place's kind and number words. A draw says "cabinet 3" where the expert would as gladly have
  gone to any of eight places and never back to the two it just left; the distribution says all
  of that at every search step. With draws, the v4 policy went back to a place it had just left
  in over a third of its ``go to`` steps in the games it lost, and most of those games were lost
  without ever seeing the object. Because the targets are recomputed for the renamed example,
  a renamed object is also searched for where its new type can lie.

Batches group examples of similar length (little padding).

Decoding
--------
A from-scratch model of this size puts part of its mass on commands that are not admissible
(``take`` + an object not in the room), so it is run restricted to the admissible commands, by
default with ``decoding: admissible``: a command is drawn with probability proportional to its
whole-command probability under the model, tempered by T
(:meth:`~creditaudit.replay.policies.hf.HFPolicy.sample`). Token-level masking (``constrained``)
chooses the verb before the object; this model cannot tell at the verb whether the task's
object is in view (its probability of ``take`` was the same, about 0.5, with and without it), so
under masking it takes whatever lies there. Whole-command scoring lets the object's probability
veto the verb.
"""

from creditaudit.replay.policies.default.augmentation import entity_names, relabel_goal, rename_entities
from creditaudit.replay.policies.default.build import (
    BUILD_FORMAT_VERSION,
    BUILD_RECORD,
    BUILD_THREADS,
    CONTEXT_LOSS_WEIGHT,
    DEMO_HORIZON,
    EVAL_HORIZON,
    build_default_policy,
    generate_build_games,
)
from creditaudit.replay.policies.default.demonstrations import (
    BCExample,
    DemonstrationReport,
    DemoState,
    noisy_demonstrations,
    parallel_demonstrations,
)
from creditaudit.replay.policies.default.evaluation import PolicyEvaluation, evaluate_policy
from creditaudit.replay.policies.default.model import build_model
from creditaudit.replay.policies.default.targets import expert_search
from creditaudit.replay.policies.default.training import is_decisive, train_behaviour_cloning
from creditaudit.replay.policies.default.vocabulary import (
    EOA_TOKEN,
    NEWLINE_TOKEN,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    UNK_TOKEN,
    build_tokenizer,
    build_vocabulary,
    environment_words,
    words_from_texts,
)

__all__ = [
    "PAD_TOKEN",
    "EOA_TOKEN",
    "UNK_TOKEN",
    "NEWLINE_TOKEN",
    "SPECIAL_TOKENS",
    "BUILD_FORMAT_VERSION",
    "BUILD_THREADS",
    "DEMO_HORIZON",
    "EVAL_HORIZON",
    "CONTEXT_LOSS_WEIGHT",
    "entity_names",
    "rename_entities",
    "relabel_goal",
    "environment_words",
    "words_from_texts",
    "build_vocabulary",
    "build_tokenizer",
    "is_decisive",
    "build_model",
    "BCExample",
    "DemoState",
    "expert_search",
    "DemonstrationReport",
    "noisy_demonstrations",
    "parallel_demonstrations",
    "train_behaviour_cloning",
    "PolicyEvaluation",
    "evaluate_policy",
    "generate_build_games",
    "build_default_policy",
    "BUILD_RECORD",
]
