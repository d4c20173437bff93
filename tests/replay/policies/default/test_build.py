"""Tests of the embedded default policy's recipe (creditaudit.replay.policies.default).

Most tests run on a tiny in-test text game with the ALFWorld command grammar, so they take
seconds; the ``slow`` test builds a small policy on real generated ALFWorld games.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from creditaudit.replay.policies.default import (
    BUILD_RECORD,
    DEMO_HORIZON,
    EOA_TOKEN,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    UNK_TOKEN,
    BCExample,
    DemoState,
    build_default_policy,
    build_model,
    expert_search,
    build_tokenizer,
    build_vocabulary,
    environment_words,
    evaluate_policy,
    noisy_demonstrations,
    is_decisive,
    relabel_goal,
    rename_entities,
    train_behaviour_cloning,
)
from creditaudit.replay.envs import Observation, StepResult, Task
from creditaudit.replay.envs.alfworld.expert import expert_action, parse_goal, search_weights
from creditaudit.replay.policies import HFPolicy, PromptBuilder, load_policy, policy_file_hashes
from creditaudit.replay.policies.default.training import packed_batch, split_at_goal

# ----------------------------------------------------------------------------- a tiny game


class TinyHouse:
    """Three places; fetch an object and put it on the target. Same command grammar as ALFWorld."""

    name = "tiny-house"

    def __init__(self, horizon: int = 12):
        self.horizon = horizon

    def reset(self, task: Task) -> Observation:
        p = task.params
        self.obj, self.src, self.dst = p["obj"], p["src"], p["dst"]
        self.places = list(p["places"])
        self.where, self.here, self.holding, self.opened = self.src, None, False, set()
        self.t, self.done, self.won = 0, False, False
        self.goal = f"put some {self.obj.split()[0]} on {self.dst.split()[0]}."
        text = "You are in the middle of a room. Looking quickly around you, you see " + ", ".join(
            f"a {x}" for x in self.places) + f".\n\nYour task is to: {self.goal}"
        return Observation(self.goal, text, self.admissible_actions())

    def admissible_actions(self):
        # As the real engine: every place but the current one is a ``go to``; ``examine`` names
        # the current place and the object in hand.
        out = [f"go to {x}" for x in self.places if x != self.here]
        if self.holding:
            out.append(f"examine {self.obj}")
        if self.here is not None:
            out.append(f"examine {self.here}")
            if self.here.startswith("drawer") and self.here not in self.opened:
                out.append(f"open {self.here}")
            if self.where == self.here and not self.holding:
                out.append(f"take {self.obj} from {self.here}")
            if self.holding:
                out.append(f"move {self.obj} to {self.here}")
        return tuple(sorted(out + ["inventory", "look"]))

    def step(self, action: str) -> StepResult:
        ok = action in self.admissible_actions()
        self.t += 1
        text = "Nothing happens."
        if ok and action.startswith("go to "):
            self.here = action[6:]
            seen = f"a {self.obj}" if self.where == self.here and not self.holding else "nothing"
            text = f"You arrive at {self.here}. On the {self.here}, you see {seen}."
        elif ok and action.startswith("take "):
            self.holding, self.where = True, None
            text = f"You pick up the {self.obj} from the {self.here}."
        elif ok and action.startswith("move "):
            self.holding, self.where = False, self.here
            text = f"You move the {self.obj} to the {self.here}."
            self.won = self.here == self.dst
        elif ok and action.startswith("open "):
            self.opened.add(self.here)
            text = f"You open the {self.here}."
        self.done = self.won or self.t >= self.horizon
        return StepResult(text, self.admissible_actions(), self.done, self.won, self.t >= self.horizon and not self.won)

    def close(self):
        pass


@dataclass(frozen=True)
class TinyGame:
    task: Task
    walkthrough: tuple[str, ...] = field(default=())


def tiny_games(n: int, offset: int = 0) -> list[TinyGame]:
    objs = ["mug", "apple", "book", "pen", "cup"]
    places = ["desk 1", "shelf 1", "drawer 1", "sofa 1"]
    out = []
    for k in range(offset, offset + n):
        obj = f"{objs[k % 5]} {1 + k % 2}"
        src, dst = places[k % 4], places[(k + 1 + k // 4) % 4]
        if src == dst:
            dst = places[(k + 2) % 4]
        walk = (f"go to {src}", f"take {obj} from {src}", f"go to {dst}", f"move {obj} to {dst}")
        task = Task(f"tiny-{k}", "pick_and_place_simple", "tiny", {"obj": obj, "src": src, "dst": dst, "places": places})
        out.append(TinyGame(task, walk))
    return out


def _env_factory(horizon: int = 12):
    return TinyHouse(horizon=min(horizon, 12))


# ----------------------------------------------------------------------------- vocabulary


def test_vocabulary_and_tokenizer():
    words = environment_words()
    assert {"alarmclock", "countertop", "fridge", "go", "take", "move", "open", "0", "1", "20", "99"} <= words
    vocab = build_vocabulary(["Zorblax glorp 7."])
    assert vocab[:3] == list(SPECIAL_TOKENS) and len(set(vocab)) == len(vocab)
    assert {"zorblax", "glorp"} <= set(vocab)
    tok = build_tokenizer(vocab)
    ids = tok("Take Mug 1 from CounterTop 2", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == "take mug 1 from countertop 2"
    assert tok.convert_ids_to_tokens(tok("qwertyuiop")["input_ids"]) == [UNK_TOKEN]
    assert (tok.eos_token, tok.pad_token, tok.unk_token) == (EOA_TOKEN, PAD_TOKEN, UNK_TOKEN)
    with pytest.raises(ValueError, match="special tokens"):
        build_tokenizer(["a", "b"])


def test_rename_entities_is_consistent():
    names = ["mug", "desk", "apple", "sofa", "shelf", "pen"]
    prompt = "On the desk 1, you see a mug 2.\nadmissible actions: take mug 2 from desk 1 | look\naction:"
    p, a = rename_entities(prompt, "take mug 2 from desk 1", np.random.default_rng(3), names)
    assert a in p and a.split()[0] == "take" and a.split()[3] == "from"
    assert p.count(a.split()[1]) == prompt.count("mug") and "look" in p


def test_rename_entities_permutes_instance_numbers_consistently():
    prompt = "On the desk 1, you see a mug 2, and a mug 3.\nadmissible actions: take mug 2 from desk 1 | take mug 3 from desk 1"
    seen = set()
    for seed in range(20):
        p, a = rename_entities(prompt, "take mug 3 from desk 1", np.random.default_rng(seed), ["mug", "pen"], max_number=9)
        assert a in p  # the renamed action is still one of the listed commands
        numbers = [int(w) for w in p.replace(",", " ").replace(".", " ").split() if w.isdigit()]
        assert len(set(numbers)) == 3 and all(1 <= n <= 9 for n in numbers)  # a permutation: distinct stays distinct
        seen.add(a.split()[2])
    assert len(seen) > 3  # the number of the chosen object really changes


def test_decisive_examples_are_object_handling_or_going_with_the_object_in_hand():
    searching = "admissible actions: go to desk 1 | go to safe 1 | open drawer 1\nobservation: x\naction:"
    holding = "admissible actions: go to desk 1 | go to safe 1 | move watch 1 to drawer 1\nobservation: x\naction:"
    assert not is_decisive(BCExample(searching, "go to safe 1"))
    assert not is_decisive(BCExample(searching, "open drawer 1"))
    assert is_decisive(BCExample(holding, "go to safe 1"))
    assert is_decisive(BCExample(searching, "take watch 1 from drawer 1"))
    assert is_decisive(BCExample(holding, "heat watch 1 with microwave 1"))
    # a "move" word in the history (not the admissible line) does not count
    assert not is_decisive(BCExample("action: move watch 1 to desk 1\n" + searching, "go to safe 1"))


def test_length_bucketed_batches_cover_every_example_once_with_little_padding():
    from creditaudit.replay.policies.default.training import length_bucketed_batches

    rng = np.random.default_rng(0)
    lengths = [int(x) for x in rng.integers(50, 400, size=1000)]
    batches = length_bucketed_batches(lengths, 16, np.random.default_rng(1))
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(1000)) and len(batches) == -(-1000 // 16)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    random_batches = [list(range(k, min(k + 16, 1000))) for k in range(0, 1000, 16)]
    padded_random = sum(len(b) * max(lengths[i] for i in b) for b in random_batches)
    assert padded < 0.8 * padded_random
    assert length_bucketed_batches(lengths, 16, np.random.default_rng(1)) == batches


# ----------------------------------------------------------------------------- demonstrations


def _play(games, noise_rate, seed, passes=1):
    return noisy_demonstrations([g.task for g in games], TinyHouse(30), noise_rate=noise_rate, history_length=2,
                                passes=passes, rng_for=lambda i: np.random.default_rng(seed + i))


def test_demonstrations_without_noise_are_the_expert_and_win():
    games = tiny_games(4)
    rep = _play(games, 0.0, 0)
    assert all(e.target for e in rep.examples) and rep.mistakes == 0
    assert rep.episodes == 4 and rep.episodes_won == 4
    assert rep.examples[0].prompt.endswith("action:") and "task: put some mug on shelf." in rep.examples[0].prompt
    # every expert action is admissible where it was taken, and every episode ends with the move
    for e in rep.examples:
        admissible = e.prompt.split("admissible actions: ")[1].split("\n")[0].split(" | ")
        assert e.action in admissible
    assert sum(e.action.startswith("move ") for e in rep.examples) == 4
    again = _play(games, 0.0, 0)
    assert again.examples == rep.examples  # the expert's draws come from the given generators


def test_noisy_demonstrations_mask_mistakes_and_passes_repeat_games():
    games = tiny_games(6)
    rep = _play(games, 0.6, 100, passes=2)
    mistakes = [e for e in rep.examples if not e.target]
    assert rep.mistakes == len(mistakes) > 0 and rep.episodes == 12
    for e in mistakes:  # a wrong move/look/open, or an inadmissible variant of the expert's command
        admissible = e.prompt.split("admissible actions: ")[1].split("\n")[0].split(" | ")
        assert (e.action in admissible and e.action.startswith(("go to ", "examine ", "open "))) or (
            e.action not in admissible)
    assert any(e.action not in e.prompt for e in mistakes) and any(e.action in e.prompt for e in mistakes)
    # mistakes never make a game impossible: the expert recovers within the horizon
    assert rep.episodes_won >= 10


# ----------------------------------------------------------------------------- training


def _tiny_model(tok, seed=5):
    return build_model(len(tok), tok, hidden_size=32, num_layers=1, num_heads=2, init_seed=seed)


def _demos():
    return _play(tiny_games(8), 0.3, 0)


def test_training_lowers_the_loss_and_is_reproducible():
    demos = _demos()
    tok = build_tokenizer(build_vocabulary(e.prompt for e in demos.examples))
    states, stats = [], []
    for _ in range(2):
        model = _tiny_model(tok)
        stats.append(train_behaviour_cloning(model, tok, demos.examples, epochs=3, learning_rate=1e-2,
                                             rng=np.random.default_rng(0), batch_size=8, context_weight=1.0))
        states.append({k: v.clone() for k, v in model.state_dict().items()})
    assert stats[0] == stats[1]
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert stats[0]["last_epoch_loss"] < stats[0]["first_epoch_loss"]
    assert stats[0]["examples"] == sum(e.target for e in demos.examples)
    with pytest.raises(Exception, match="no target example"):
        train_behaviour_cloning(_tiny_model(tok), tok, [BCExample("p", "a", False)], epochs=1, learning_rate=1e-3,
                                rng=np.random.default_rng(0))


def test_evaluation_counts_and_does_not_depend_on_batching():
    demos = _demos()
    tok = build_tokenizer(build_vocabulary(e.prompt for e in demos.examples))
    policy = HFPolicy(_tiny_model(tok), tok, max_action_tokens=6)
    games = tiny_games(3, offset=20)
    runs = [evaluate_policy(policy, games, env_factory=_env_factory, seed=9, rollouts_per_task=2, n_envs=n)
            for n in (1, 4)]
    assert runs[0].per_task == runs[1].per_task
    assert (runs[0].steps, runs[0].admissible_steps) == (runs[1].steps, runs[1].admissible_steps)
    r = runs[0]
    assert r.episodes == 6 and 6 <= r.steps <= 6 * 12 and 0 <= r.admissible_steps <= r.steps
    assert 0.0 <= r.success_rate <= 1.0 and r.to_dict()["temperature"] == 0.7


# ----------------------------------------------------------------------------- goal relabelling

_NAMES = ("mug", "pen", "apple", "book", "vase", "watch")
_SHELF = DemoState(
    "put a mug in desk.",
    "You arrive at shelf 1. On the shelf 1, you see a pen 1, and a mug 2.",
    ("examine shelf 1", "go to desk 1", "go to drawer 1", "help", "take mug 2 from shelf 1",
     "take pen 1 from shelf 1"),
    (("You arrive at drawer 1. The drawer 1 is closed.", "go to shelf 1"),), 2)
_HOLDING = DemoState(
    "put a mug in desk.",
    "You arrive at desk 1. On the desk 1, you see a vase 1.",
    ("examine desk 1", "examine mug 2", "go to drawer 1", "go to shelf 1", "go to sinkbasin 1", "go to microwave 1",
     "move mug 2 to desk 1"),
    (("You arrive at shelf 1. On the shelf 1, you see a mug 2.", "take mug 2 from shelf 1"),), 2)


def _example(state: DemoState, action: str) -> BCExample:
    from creditaudit.replay.envs.alfworld.env import ALFWORLD_PROMPT

    builder = PromptBuilder(None, history_length=state.history_length, instruction=ALFWORLD_PROMPT.instruction)
    return BCExample(builder.build(state.goal, state.observation, state.admissible, state.history), action, True, state)


def _only_the_task_line_differs(a: BCExample, b: BCExample) -> bool:
    la, lb = a.prompt.splitlines(), b.prompt.splitlines()
    return len(la) == len(lb) and [k for k, (x, y) in enumerate(zip(la, lb)) if x != y] == [len(la) - 2]


def test_relabelled_goal_naming_another_object_in_view_is_taken():
    ex = _example(_SHELF, "take mug 2 from shelf 1")
    new = relabel_goal(ex, np.random.default_rng(0), _NAMES, absent_share=0.0)
    assert new.state.goal == "put a pen in desk." and new.action == "take pen 1 from shelf 1"
    assert _only_the_task_line_differs(ex, new) and new.target
    # the rebuilt prompt is the one the policy would see in that state under that goal
    assert new.prompt == _example(new.state, new.action).prompt


def test_relabelled_goal_naming_an_absent_object_searches_on():
    ex = _example(_SHELF, "take mug 2 from shelf 1")
    for seed in range(10):
        new = relabel_goal(ex, np.random.default_rng(seed), _NAMES, absent_share=1.0)
        obj = parse_goal(new.state.goal).obj
        assert obj in {"apple", "book", "vase", "watch"}  # in no line of the view
        assert new.action in ("go to desk 1", "go to drawer 1") and _only_the_task_line_differs(ex, new)


def test_relabelled_goal_with_the_object_in_hand_changes_the_place_or_the_task_kind():
    ex = _example(_HOLDING, "move mug 2 to desk 1")
    seen = set()
    for seed in range(40):
        new = relabel_goal(ex, np.random.default_rng(seed), _NAMES)
        goal = parse_goal(new.state.goal)
        assert goal.obj == "mug" and new.state.goal != ex.state.goal
        expected = {"heat": "go to microwave 1", "clean": "go to sinkbasin 1", "cool": None}.get(goal.kind)
        if goal.kind == "cool":  # no fridge in this room: the expert goes on to the target
            expected = "move mug 2 to desk 1" if goal.recep == "desk" else f"go to {goal.recep} 1"
        elif expected is None:
            expected = "move mug 2 to desk 1" if goal.recep == "desk" else f"go to {goal.recep} 1"
        assert new.action == expected, (new.state.goal, new.action)
        seen.add(new.action.split()[0] + ("-kind" if goal.kind != "simple" else ""))
    assert {"go", "go-kind"} <= seen


def test_relabelling_with_the_object_in_hand_where_only_the_goal_place_is_elsewhere():
    # every other place is of the goal's kind: the relabelled goal names the place here
    state = DemoState("put a mug in desk.", "You arrive at shelf 1. On the shelf 1, you see nothing.",
                      ("examine mug 2", "examine shelf 1", "go to desk 1", "move mug 2 to shelf 1"), (), 2)
    moved = 0
    for seed in range(12):
        new = relabel_goal(_example(state, "go to desk 1"), np.random.default_rng(seed), _NAMES)
        goal = parse_goal(new.state.goal)
        if goal.recep == "shelf":
            moved += 1
            assert goal.kind == "simple" and new.action == "move mug 2 to shelf 1"
        else:  # another task kind; no appliance in this room, so on to the goal's place
            assert goal.kind != "simple" and new.action == "go to desk 1"
    assert 0 < moved < 12


def test_relabelling_skips_mistakes_and_examples_without_state():
    ex = _example(_SHELF, "take mug 2 from shelf 1")
    assert relabel_goal(BCExample(ex.prompt, ex.action, False, ex.state), np.random.default_rng(0), _NAMES) is None
    assert relabel_goal(BCExample(ex.prompt, ex.action), np.random.default_rng(0), _NAMES) is None


def test_packed_goal_variants_score_each_branch_as_if_alone():
    demos = _demos()
    tok = build_tokenizer(build_vocabulary([e.prompt for e in demos.examples] + list(_NAMES)))
    model = _tiny_model(tok).eval()
    rows = [e for e in demos.examples if e.target and e.state is not None][:6]
    assert all(split_at_goal(e.prompt) is not None for e in rows)
    ids, mask, positions, labels, soft = packed_batch(tok, rows, np.random.default_rng(3), _NAMES, goal_variants=3,
                                                 rename=False, augment_share=0.0, max_number=0)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask, position_ids=positions).logits, -1)
    packed = [float(logp[r, t - 1, labels[r, t]]) for r in range(len(rows)) for t in range(1, ids.shape[1])
              if labels[r, t] != -100]
    # the same branches, drawn from the same generator, each scored on its own
    rng, alone, branches = np.random.default_rng(3), [], 0
    for ex in rows:
        variants = [v for v in (relabel_goal(ex, rng, _NAMES) for _ in range(3)) if v is not None]
        for b in [ex] + variants:
            branches += 1
            p = tok(b.prompt)["input_ids"]
            full = p + tok(b.action, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            with torch.no_grad():
                lp = torch.log_softmax(model(input_ids=torch.tensor([full])).logits, -1)
            alone += [float(lp[0, t - 1, full[t]]) for t in range(len(p), len(full))]
    assert branches > len(rows)  # variants were packed
    np.testing.assert_allclose(packed, alone, atol=1e-5)
    assert soft is None  # no soft targets unless asked for


# A search state: holding nothing, no mug in view, drawer 1 just visited.
_SEARCH = DemoState(
    "put a mug in desk.",
    "You arrive at shelf 1. On the shelf 1, you see a pen 1.",
    ("examine shelf 1", "go to cabinet 1", "go to cabinet 2", "go to drawer 1", "go to desk 1", "go to toilet 1",
     "take pen 1 from shelf 1"),
    (("You arrive at drawer 1. On the drawer 1, you see nothing.", "go to drawer 1"),), 2)


def _expected_search(state):
    # the expert's distribution, from the searcher's own weights (mug: not in a toilet)
    places = [a[len("go to "):] for a in state.admissible if a.startswith("go to ")]
    w = np.array(search_weights(places, "mug", {"drawer 1"}))
    return dict(zip(places, w / w.sum()))


def test_expert_search_is_the_experts_distribution_and_draw():
    expected = _expected_search(_SEARCH)
    assert expected["drawer 1"] == 0 and expected["toilet 1"] < expected["cabinet 1"]
    action, dist = expert_search(_SEARCH, np.random.default_rng(0))
    assert dist == pytest.approx({k: v for k, v in expected.items() if v > 0})
    # the draw is the expert's own draw with the same generator
    assert action == expert_action(_SEARCH.goal, _SEARCH.observation, _SEARCH.admissible, _SEARCH.history,
                                   np.random.default_rng(0))
    # a decision the expert takes for sure has no distribution
    assert expert_search(_SHELF, np.random.default_rng(0)) == ("take mug 2 from shelf 1", None)


def test_soft_search_targets_are_the_cross_entropy_against_the_expert_distribution():
    tok = build_tokenizer(build_vocabulary([_example(_SEARCH, "go to cabinet 1").prompt] + list(_NAMES)))
    model = _tiny_model(tok).eval()
    ex = _example(_SEARCH, "go to cabinet 1")
    ids, mask, positions, labels, soft = packed_batch(tok, [ex], np.random.default_rng(4), _NAMES, goal_variants=0,
                                                      rename=False, augment_share=0.0, max_number=0,
                                                      search_targets=True)
    rows, at, targets = soft
    assert rows.tolist() == [0, 0] and (labels[0, at] == -100).all()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    soft_ce = float(-(targets * torch.log_softmax(logits[rows, at - 1], -1)).sum())
    # The same quantity from the expert's distribution and the model scored on the prompt alone:
    # -sum_k Q(kind k) log P(k | "go to") - sum_n Q(n | drawn kind) log P(n | "go to <kind>").
    expected = _expected_search(_SEARCH)
    drawn = tok.decode(ids[0, at[0]].item()).strip()
    prompt = tok(ex.prompt)["input_ids"] + tok("go to", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        lp_kind = torch.log_softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1], -1)
        kind_id = tok(drawn, add_special_tokens=False)["input_ids"]
        lp_num = torch.log_softmax(model(input_ids=torch.tensor([prompt + kind_id])).logits[0, -1], -1)
    kinds = {}
    for place, q in expected.items():
        kinds[place.split()[0]] = kinds.get(place.split()[0], 0.0) + q
    ref = -sum(q * float(lp_kind[tok(k, add_special_tokens=False)["input_ids"][0]]) for k, q in kinds.items() if q)
    same_kind = {p.split()[1]: q for p, q in expected.items() if p.split()[0] == drawn and q}
    ref -= sum(q / sum(same_kind.values()) * float(lp_num[tok(n, add_special_tokens=False)["input_ids"][0]])
               for n, q in same_kind.items())
    assert soft_ce == pytest.approx(ref, rel=1e-4)
    # the branch's action is a draw of the expert's: a place of positive probability
    assert drawn in kinds and kinds[drawn] > 0


# ----------------------------------------------------------------------------- the build


def _weights_hash(path):
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_build_on_a_tiny_game_is_reproducible_and_loads_generically(tmp_path):
    build = {"seed": 7, "hidden_size": 16, "num_layers": 1, "num_heads": 2, "train_games": 6, "passes": 1,
             "noise_rate": 0.25, "epochs": 2, "learning_rate": 3e-3}
    results, horizons = [], []

    def factory(horizon):
        horizons.append(horizon)
        return _env_factory(horizon)

    for name in ("a", "b"):
        results.append(build_default_policy(
            tmp_path / name, build, train_games=tiny_games(6), held_out_games=tiny_games(2, offset=30),
            env_factory=factory, progress=None, eval_horizon=3,
        ))
    a, b = results
    assert _weights_hash(tmp_path / "a") == _weights_hash(tmp_path / "b")
    assert a["files"] == b["files"] == policy_file_hashes(tmp_path / "a")
    assert a["evaluation"] == b["evaluation"] and a["evaluation"]["episodes"] == 2
    # demonstrations at their own horizon, the evaluation at the one asked for (3 steps at most;
    # a tiny game's expert needs more, so no held-out episode can be won)
    assert set(horizons) == {DEMO_HORIZON, 3}
    assert a["evaluation"]["horizon"] == 3 and a["evaluation"]["steps"] <= 2 * 3
    assert a["evaluation"]["successes"] == 0
    assert (tmp_path / "a" / BUILD_RECORD).read_bytes() == (tmp_path / "b" / BUILD_RECORD).read_bytes()
    policy = load_policy(tmp_path / "a", device="cpu")
    assert policy.tokenizer.eos_token == EOA_TOKEN and policy.prompt_builder.mode == "plain"
    other = build_default_policy(tmp_path / "c", {**build, "seed": 8}, train_games=tiny_games(6),
                                 env_factory=_env_factory, evaluate=False)
    assert other["evaluation"] is None and _weights_hash(tmp_path / "c") != _weights_hash(tmp_path / "a")


@pytest.mark.slow
def test_build_on_generated_alfworld_games_is_reproducible(tmp_path):
    pytest.importorskip("textworld")
    build = {"seed": 11, "hidden_size": 16, "num_layers": 1, "num_heads": 2, "train_games": 6, "passes": 1,
             "noise_rate": 0.25, "epochs": 1, "learning_rate": 3e-3}
    games = tmp_path / "games"
    a = build_default_policy(tmp_path / "a", build, games_dir=games, evaluate=False)
    b = build_default_policy(tmp_path / "b", build, games_dir=games, evaluate=False)
    assert _weights_hash(tmp_path / "a") == _weights_hash(tmp_path / "b")
    assert a["files"]["model_files"] == b["files"]["model_files"]
    assert a["demonstrations"]["examples"] > 6
    policy = load_policy(tmp_path / "a", device="cpu")
    prompt = policy.prompt_builder.build("put some mug on desk.", "You arrive at desk 1.", ["go to desk 1", "look"])
    out = policy.sample([prompt], seeds=[1], temperature=0.7)[0]
    assert out.stop_reason in {"eos", "newline", "max_tokens"}


@pytest.mark.slow
def test_parallel_demonstrations_equal_the_serial_ones(alfworld_games):
    import functools

    from creditaudit.replay.policies.default import parallel_demonstrations
    from creditaudit.replay.policies.default.build import alfworld_environment

    tasks = [g.task for g in alfworld_games.games[:3]]
    factory = functools.partial(alfworld_environment, 30)
    serial = parallel_demonstrations(tasks, factory, root="t", noise_rate=0.3, history_length=2, workers=1)
    pooled = parallel_demonstrations(tasks, factory, root="t", noise_rate=0.3, history_length=2, workers=2)
    assert pooled == serial and serial.episodes == 3 and serial.mistakes > 0
    other = parallel_demonstrations(tasks, factory, root="u", noise_rate=0.3, history_length=2, workers=1)
    assert other.examples != serial.examples  # the draws come from the root's streams
