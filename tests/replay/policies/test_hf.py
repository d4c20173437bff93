"""Tests of the policy interface (creditaudit.replay.policies) on tiny randomly initialised Qwen2
models built here: no download, no trained weights."""

from __future__ import annotations

import json
import math

import numpy as np

import pytest
import torch

from creditaudit.errors import InputError
from creditaudit.protocol.inputs import chat_template_sha256
from creditaudit.replay.policies import HFPolicy, PromptBuilder, format_hindsight, load_policy, policy_file_hashes
from creditaudit.replay.policies.default import SPECIAL_TOKENS, build_model, build_tokenizer

WORDS = sorted(
    {
        "go", "to", "desk", "take", "mug", "from", "put", "in", "on", "fridge", "apple", "open", "examine",
        "look", "task", "observation", "action", "admissible", "actions", "outcome", "you", "see", "a", "the",
        "arrive", "at", "1", "2", "3", ":", "|", ".", ",",
    }
)
GOAL = "put a mug in the fridge"
ADMISSIBLE = ["go to desk 1", "take mug 1 from desk 1", "open fridge 1", "look"]


def _tokenizer():
    return build_tokenizer(list(SPECIAL_TOKENS) + WORDS)


def _model(tokenizer, seed=0, scale=4.0):
    model = build_model(len(tokenizer), tokenizer, hidden_size=32, num_layers=2, num_heads=4, init_seed=seed)
    # Larger embeddings make the random model's next-token distribution far from uniform, which
    # the temperature test needs.
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(scale)
    return model.eval()


@pytest.fixture(scope="module")
def policy():
    tok = _tokenizer()
    return HFPolicy(_model(tok), tok, history_length=2, max_action_tokens=6)


def _prompts(policy, n=5):
    b = policy.prompt_builder
    out = []
    for i in range(n):
        history = [(f"you arrive at desk {1 + j % 3}", "look") for j in range(i)]
        out.append(b.build(GOAL, "you see a mug 1 " * (i + 1), ADMISSIBLE[: 1 + i % 4], history))
    return out


# ----------------------------------------------------------------------------- scoring


def test_score_matches_manual_forward_pass(policy):
    prompt = _prompts(policy, 1)[0]
    action = "take mug 1 from desk 1"
    score = policy.score([prompt], [action], include_stop=True)[0]
    ids = policy.encode_prompt(prompt) + policy.encode_action(action) + [policy.eos_token_id]
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0]
    logp = torch.log_softmax(logits.double(), dim=-1)
    n_prompt = len(policy.encode_prompt(prompt))
    manual = [float(logp[p - 1, ids[p]]) for p in range(n_prompt, len(ids))]
    assert score.token_ids == tuple(policy.encode_action(action))
    assert score.n_tokens == 6
    assert score.token_logprobs == pytest.approx(manual[:-1], abs=1e-5)
    assert score.stop_logprob == pytest.approx(manual[-1], abs=1e-5)
    assert score.sum_logprob == pytest.approx(sum(manual[:-1]), abs=1e-5)
    assert score.mean_logprob == pytest.approx(sum(manual[:-1]) / 6, abs=1e-5)


def test_score_batched_equals_unbatched(policy):
    prompts = _prompts(policy, 5)
    actions = ["go to desk 1", "look", "take mug 1 from desk 1", "open fridge 1", "put mug 1 in fridge 1"]
    batched = policy.score(prompts, actions, include_stop=True, batch_size=5)
    for p, a, b in zip(prompts, actions, batched):
        alone = policy.score([p], [a], include_stop=True, batch_size=1)[0]
        assert alone.token_ids == b.token_ids
        assert alone.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-5)
        assert alone.stop_logprob == pytest.approx(b.stop_logprob, abs=1e-5)


def test_score_rejects_bad_rows(policy):
    with pytest.raises(ValueError, match="same length"):
        policy.score(["a"], ["b", "c"])
    with pytest.raises(InputError, match=r"`actions\[0\]`"):
        policy.score(["task :"], ["   "])


# ----------------------------------------------------------------------------- sampling


def test_sampling_is_reproducible(policy):
    prompts = _prompts(policy, 4)
    a = policy.sample(prompts, seeds=[1, 2, 3, 4], temperature=1.0)
    b = policy.sample(prompts, seeds=[1, 2, 3, 4], temperature=1.0)
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    assert [x.token_logprobs for x in a] == [x.token_logprobs for x in b]
    c = policy.sample(prompts, seeds=[5, 6, 7, 8], temperature=1.0)
    assert [x.token_ids for x in a] != [x.token_ids for x in c]


def test_sample_row_depends_only_on_its_prompt_and_seed(policy):
    prompts = _prompts(policy, 5)
    target, seed = prompts[2], 12345
    alone = policy.sample([target], seeds=[seed], temperature=1.0)[0]
    others = [
        ([target] + prompts[:2], [seed, 7, 8], 0),
        (prompts[3:] + [target] + prompts[:1], [1, 2, seed, 3], 2),
        ([prompts[4], prompts[0], target], [9, 9, seed], 2),
    ]
    for batch, seeds, where in others:
        for bs in (1, 2, 32):
            row = policy.sample(batch, seeds=seeds, temperature=1.0, batch_size=bs)[where]
            assert row.text == alone.text
            assert row.token_ids == alone.token_ids
            assert row.token_logprobs == pytest.approx(alone.token_logprobs, abs=1e-5)


def test_sampled_logprobs_are_the_policy_logprobs_at_temperature_one(policy):
    prompts = _prompts(policy, 3)
    for temperature in (0.5, 1.0, 2.0):
        for s in policy.sample(prompts, seeds=[11, 12, 13], temperature=temperature):
            assert len(s.token_ids) == len(s.token_logprobs) <= 6
            if not s.text:
                continue
            scored = policy.score([prompts[[11, 12, 13].index(s.seed)]], [s.text], include_stop=True)[0]
            assert scored.token_ids == s.token_ids  # the word-level tokenizer round-trips
            assert scored.token_logprobs == pytest.approx(s.token_logprobs, abs=1e-5)
            if s.stop_reason == "eos":
                assert scored.stop_logprob == pytest.approx(s.stop_logprob, abs=1e-5)


def test_temperature_zero_is_greedy_and_ignores_the_seed(policy):
    prompt = _prompts(policy, 1)[0]
    greedy = policy.sample([prompt] * 3, seeds=[1, 2, 3], temperature=0)
    assert len({g.token_ids for g in greedy}) == 1
    ids = policy.encode_prompt(prompt)
    with torch.no_grad():
        first = int(policy.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
    assert (greedy[0].token_ids[:1] or (policy.eos_token_id,))[0] == first


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_first_token_frequencies_follow_softmax_at_temperature(policy, temperature):
    prompt = _prompts(policy, 1)[0]
    ids = policy.encode_prompt(prompt)
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0, -1].double()
    probs = torch.softmax(logits / temperature, -1)
    top = int(probs.argmax())
    n = 600
    draws = policy.sample([prompt] * n, seeds=list(range(n)), temperature=temperature, max_action_tokens=1)
    firsts = [d.token_ids[0] if d.token_ids else policy.eos_token_id for d in draws]
    freq = firsts.count(top) / n
    p = float(probs[top])
    assert abs(freq - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-9
    # and the reported log-probability is the temperature-1 one
    tops = [d for d in draws if d.token_ids and d.token_ids[0] == top]
    if tops:
        assert tops[0].token_logprobs[0] == pytest.approx(float(torch.log_softmax(logits, -1)[top]), abs=1e-5)


def test_stop_at_eos_newline_and_max_tokens():
    tok = _tokenizer()
    tok.add_tokens(["\n"])  # a line-break token (the word-level pre-tokenizer drops whitespace)
    model = _model(tok)
    model.resize_token_embeddings(len(tok))
    newline = tok.convert_tokens_to_ids("\n")
    bias = torch.zeros(len(tok))
    handle = model.lm_head.register_forward_hook(lambda m, i, o: o + bias)
    pol = HFPolicy(model, tok, max_action_tokens=4)
    assert newline in pol.newline_token_ids
    prompt = pol.prompt_builder.build(GOAL, "you see a mug 1", ADMISSIBLE)
    try:
        out = pol.sample([prompt] * 8, seeds=list(range(8)), temperature=1.0)
        assert all(o.stop_reason == "max_tokens" and len(o.token_ids) == 4 and o.stop_logprob is None for o in out
                   if o.stop_reason == "max_tokens")
        assert pol.sample([prompt], seeds=[0], temperature=1.0, max_action_tokens=2)[0].token_ids.__len__() <= 2
        bias[pol.eos_token_id] = 50.0
        out = pol.sample([prompt] * 3, seeds=[0, 1, 2], temperature=1.0)
        assert all(o.stop_reason == "eos" and o.text == "" and o.stop_logprob > -1e-3 for o in out)
        bias[pol.eos_token_id] = 0.0
        bias[newline] = 50.0
        out = pol.sample([prompt] * 3, seeds=[0, 1, 2], temperature=1.0)
        assert all(o.stop_reason == "newline" and o.text == "" and o.token_ids == () for o in out)
    finally:
        handle.remove()


def test_sample_rejects_bad_arguments(policy):
    with pytest.raises(ValueError, match="`seeds`"):
        policy.sample(["a", "b"], seeds=[1], temperature=1.0)
    with pytest.raises(ValueError, match="`temperature`"):
        policy.sample(["a"], seeds=[1], temperature=-1.0)
    with pytest.raises(ValueError, match="`seeds`"):
        policy.sample(["a"], seeds=[-3], temperature=1.0)


# ----------------------------------------------------------------------------- prompts


def test_prompt_builder_shows_the_last_history_length_turns():
    history = [(f"obs {i}", f"act {i}") for i in range(5)]
    text = PromptBuilder(None, history_length=2).build(GOAL, "now", ADMISSIBLE, history)
    assert "obs 3" in text and "act 4" in text and "obs 2" not in text and "act 2" not in text
    assert text.index("obs 3") < text.index("obs 4") < text.index("observation: now")
    assert text.endswith("action:")
    assert "admissible actions: go to desk 1 | take mug 1 from desk 1 | open fridge 1 | look" in text
    none = PromptBuilder(None, history_length=0).build(GOAL, "now", ADMISSIBLE, history)
    assert "obs" not in none.replace("observation", "")
    short = PromptBuilder(None, history_length=9).build(GOAL, "now", ADMISSIBLE, history[:1])
    assert "obs 0" in short


def test_prompt_builder_injects_hindsight_and_hashes_its_settings():
    b = PromptBuilder(None, history_length=2)
    hind = format_hindsight("You move the mug 1 to the fridge 1.", True)
    text = b.build(GOAL, "now", ADMISSIBLE, hindsight=hind)
    assert "outcome: the task was completed successfully. final observation: You move the mug 1" in text
    assert text.index("outcome:") > text.index("admissible actions:")
    assert "outcome:" not in b.build(GOAL, "now", ADMISSIBLE)
    assert len(b.template_hash) == 64
    assert b.template_hash == PromptBuilder(None, history_length=2).template_hash
    assert b.template_hash != PromptBuilder(None, history_length=3).template_hash
    with pytest.raises(ValueError, match="`history_length`"):
        PromptBuilder(None, history_length=-1)


def test_prompt_builder_can_leave_the_admissible_commands_out_and_hashes_that():
    listed = PromptBuilder(None, history_length=1)
    unlisted = PromptBuilder(None, history_length=1, list_admissible=False)
    history = [("obs 0", "look")]
    a = listed.build(GOAL, "now", ADMISSIBLE, history)
    b = unlisted.build(GOAL, "now", ADMISSIBLE, history)
    assert "admissible actions:" in a and "admissible actions:" not in b
    assert not any(command in b for command in ADMISSIBLE if command != "look")
    # the same prompt otherwise: the listed one with its admissible line removed
    line = "admissible actions: " + " | ".join(ADMISSIBLE) + "\n"
    assert a.replace(line, "") == b
    assert unlisted.template_hash != listed.template_hash
    assert unlisted.template_settings["list_admissible"] is False
    assert "list_admissible" not in listed.template_settings  # earlier templates keep their hash
    with pytest.raises(ValueError, match="`list_admissible` must be True or False"):
        PromptBuilder(None, list_admissible="no")


def test_prompt_builder_uses_the_chat_template_when_there_is_one():
    tok = _tokenizer()
    assert PromptBuilder(tok).mode == "plain"
    tok.chat_template = "{% for m in messages %}<{{ m.role }}> {{ m.content }}{% endfor %}{% if add_generation_prompt %} <assistant>{% endif %}"
    b = PromptBuilder(tok)
    assert b.mode == "chat"
    text = b.build(GOAL, "now", ADMISSIBLE)
    assert text.startswith("<user> ") and text.endswith(" <assistant>") and "task: put a mug" in text
    assert b.template_settings["chat_template_sha256"] == chat_template_sha256(tok.chat_template)
    assert b.template_hash != PromptBuilder(tok, use_chat_template=False).template_hash
    with pytest.raises(InputError, match="no chat template"):
        PromptBuilder(_tokenizer(), use_chat_template=True)


# ----------------------------------------------------------------------------- files and loading


@pytest.fixture(scope="module")
def saved(tmp_path_factory, policy):
    path = tmp_path_factory.mktemp("policy")
    policy.model.save_pretrained(path)
    policy.tokenizer.save_pretrained(path)
    return path


def test_policy_file_hashes_and_reload(saved, policy):
    (saved / "README.md").write_text("not part of the identity")
    hashes = policy_file_hashes(saved)
    assert set(hashes) == {"model_files", "tokenizer_files", "chat_template_sha256"}
    assert {"config.json", "model.safetensors"} <= set(hashes["model_files"])
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(hashes["tokenizer_files"])
    assert "README.md" not in hashes["model_files"] and "README.md" not in hashes["tokenizer_files"]
    assert hashes["chat_template_sha256"] is None
    assert all(len(v) == 64 for v in {**hashes["model_files"], **hashes["tokenizer_files"]}.values())
    loaded = load_policy(saved, device="cpu", max_action_tokens=6)
    prompts = _prompts(policy, 2)
    a = policy.score(prompts, ["look", "go to desk 1"])
    b = loaded.score(prompts, ["look", "go to desk 1"])
    for x, y in zip(a, b):
        assert x.token_ids == y.token_ids
        assert x.token_logprobs == pytest.approx(y.token_logprobs, abs=1e-6)
    s1 = policy.sample(prompts, seeds=[3, 4], temperature=0.7)
    s2 = loaded.sample(prompts, seeds=[3, 4], temperature=0.7)
    assert [x.text for x in s1] == [x.text for x in s2]


def test_chat_template_hash_from_files_matches_the_loaded_tokenizer(tmp_path, policy):
    tok = _tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    policy.model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    hashes = policy_file_hashes(tmp_path)
    assert hashes["chat_template_sha256"] == chat_template_sha256(tok.chat_template)
    loaded = load_policy(tmp_path, device="cpu")
    assert loaded.prompt_builder.mode == "chat"
    assert loaded.prompt_builder.template_settings["chat_template_sha256"] == hashes["chat_template_sha256"]


def test_missing_path_is_an_input_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(InputError, match="does not exist.*policy build"):
        load_policy(missing)
    with pytest.raises(InputError, match="does not exist"):
        policy_file_hashes(missing)
    f = tmp_path / "file.bin"
    f.write_bytes(b"x")
    with pytest.raises(InputError, match="is a file, not a model directory"):
        load_policy(f)


def test_directory_that_is_not_a_causal_lm_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no config.json"):
        load_policy(tmp_path)
    with pytest.raises(InputError, match="no config.json"):
        policy_file_hashes(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "vit", "hidden_size": 8}))
    with pytest.raises(InputError, match="not a causal language model"):
        load_policy(tmp_path)
    with pytest.raises(InputError, match="no weight file"):
        policy_file_hashes(tmp_path)


def test_weights_missing_or_tokenizer_missing_is_an_input_error(tmp_path, policy):
    policy.model.config.save_pretrained(tmp_path)
    with pytest.raises(InputError, match=str(tmp_path).replace("\\", "\\\\") + ".*cannot be loaded"):
        load_policy(tmp_path)
    policy.model.save_pretrained(tmp_path)
    with pytest.raises(InputError, match="tokenizer cannot be loaded"):
        load_policy(tmp_path)
    with pytest.raises(InputError, match="no tokenizer file"):
        policy_file_hashes(tmp_path)


def test_tokenizer_without_end_of_sequence_token_is_an_input_error(tmp_path, policy):
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=_tokenizer().backend_tokenizer, pad_token="<pad>", unk_token="<unk>")
    assert tok.eos_token_id is None
    with pytest.raises(InputError, match="no end-of-sequence token"):
        HFPolicy(policy.model, tok)
    policy.model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with pytest.raises(InputError, match=f"{tmp_path}.*no end-of-sequence token.*eos_token"):
        load_policy(tmp_path)


# ------------------------------------------------------------------------ admissible decoding


@pytest.fixture(scope="module")
def ranking_policy(policy):
    return HFPolicy(policy.model, policy.tokenizer, history_length=2, max_action_tokens=6, decoding="admissible")


def _sequence_logprobs(policy, prompt, candidates):
    scores = policy.score([prompt] * len(candidates), list(candidates), include_stop=True)
    return np.array([s.sum_logprob + s.stop_logprob for s in scores])


def test_admissible_decoding_draws_only_candidates_with_their_own_logprobs(ranking_policy):
    prompts = _prompts(ranking_policy, 4)
    candidates = [ADMISSIBLE[: 2 + i % 3] for i in range(4)]
    samples = ranking_policy.sample(prompts, seeds=[11, 12, 13, 14], temperature=0.7, candidates=candidates)
    for prompt, cands, sample in zip(prompts, candidates, samples):
        assert sample.text in cands and sample.stop_reason == "candidate"
        own = ranking_policy.score([prompt], [sample.text], include_stop=True)[0]
        assert sample.token_logprobs == pytest.approx(own.token_logprobs, abs=1e-6)


def test_admissible_decoding_at_zero_temperature_is_the_most_probable_command(ranking_policy):
    prompt = _prompts(ranking_policy, 1)[0]
    best = ADMISSIBLE[int(np.argmax(_sequence_logprobs(ranking_policy, prompt, ADMISSIBLE)))]
    for seed in (1, 2, 3):
        assert ranking_policy.sample([prompt], seeds=[seed], temperature=0, candidates=[ADMISSIBLE])[0].text == best


def test_admissible_decoding_follows_the_tempered_softmax(ranking_policy):
    # Gumbel-max over s_c / T draws command c with probability softmax(s / T)_c.
    prompt = _prompts(ranking_policy, 1)[0]
    temperature = 2.0
    logits = _sequence_logprobs(ranking_policy, prompt, ADMISSIBLE) / temperature
    expected = np.exp(logits - logits.max())
    expected /= expected.sum()
    n = 4000
    draws = ranking_policy.sample([prompt] * n, seeds=list(range(n)), temperature=temperature,
                                  candidates=[ADMISSIBLE] * n)
    counts = np.array([sum(d.text == c for d in draws) for c in ADMISSIBLE])
    from scipy.stats import chisquare

    assert chisquare(counts, expected * n).pvalue > 1e-3


def test_free_decoding_ignores_candidates(policy):
    prompts = _prompts(policy, 3)
    a = policy.sample(prompts, seeds=[1, 2, 3], temperature=0.7)
    b = policy.sample(prompts, seeds=[1, 2, 3], temperature=0.7, candidates=[["x"], ["y"], ["z"]])
    assert [s.text for s in a] == [s.text for s in b]


def test_bad_decoding_and_empty_candidates_are_refused(policy, ranking_policy):
    with pytest.raises(ValueError, match="`decoding` must be one of"):
        HFPolicy(policy.model, policy.tokenizer, decoding="beam")
    with pytest.raises(ValueError, match=r"`candidates\[0\]` is empty"):
        ranking_policy.sample(_prompts(ranking_policy, 1), seeds=[1], temperature=1.0, candidates=[[]])


# ------------------------------------------------------------------------ constrained decoding

# Candidates sharing prefixes at several depths ("take mug ..." / "take apple ...", "go to desk ...").
TRIE = ["take mug 1 from desk 1", "take mug 2 from desk 1", "take apple 1 from desk 1", "go to desk 1",
        "go to desk 2", "look"]


@pytest.fixture(scope="module")
def masking_policy(policy):
    return HFPolicy(policy.model, policy.tokenizer, history_length=2, max_action_tokens=6, decoding="constrained")


def _constrained_probabilities(policy, prompt, candidates, temperature):
    """P(candidate) under token-level masking, from the model's raw logits (not from ``score``):
    at every prefix, softmax(logits / T) over the tokens that continue some candidate, with the
    end-of-sequence token allowed where a candidate is complete."""
    tok = policy.tokenizer
    prompt_ids = tok(prompt, add_special_tokens=True)["input_ids"]
    seqs = [tuple(tok(c, add_special_tokens=False)["input_ids"]) + (tok.eos_token_id,) for c in candidates]
    probs = []
    for seq in seqs:
        p = 1.0
        for j in range(len(seq)):
            prefix = seq[:j]
            allowed = sorted({s[j] for s in seqs if s[:j] == prefix})
            with torch.no_grad():
                logits = policy.model(input_ids=torch.tensor([list(prompt_ids) + list(prefix)])).logits[0, -1].double()
            z = logits[allowed] / temperature
            p *= float(torch.softmax(z, 0)[allowed.index(seq[j])])
        probs.append(p)
    return np.array(probs)


def test_constrained_decoding_draws_candidates_with_their_own_logprobs(masking_policy):
    prompts = _prompts(masking_policy, 4)
    samples = masking_policy.sample(prompts, seeds=[5, 6, 7, 8], temperature=0.7, candidates=[TRIE] * 4)
    for prompt, sample in zip(prompts, samples):
        assert sample.text in TRIE and sample.stop_reason == "candidate"
        own = masking_policy.score([prompt], [sample.text], include_stop=True)[0]
        assert sample.token_logprobs == pytest.approx(own.token_logprobs, abs=1e-6)


def test_constrained_decoding_follows_the_masked_token_softmax(masking_policy):
    prompt = _prompts(masking_policy, 1)[0]
    temperature = 1.5
    expected = _constrained_probabilities(masking_policy, prompt, TRIE, temperature)
    assert expected.sum() == pytest.approx(1.0, abs=1e-9)
    n = 4000
    draws = masking_policy.sample([prompt] * n, seeds=list(range(n)), temperature=temperature, candidates=[TRIE] * n)
    counts = np.array([sum(d.text == c for d in draws) for c in TRIE])
    from scipy.stats import chisquare

    assert chisquare(counts, expected * n).pvalue > 1e-3
    # It is not the sequence-level restriction of admissible decoding (which loses the mass of
    # inadmissible completions of a shared prefix).
    seq = _sequence_logprobs(masking_policy, prompt, TRIE) / temperature
    sequence_level = np.exp(seq - seq.max()) / np.exp(seq - seq.max()).sum()
    assert np.abs(sequence_level - expected).max() > 0.02


def test_constrained_decoding_at_zero_temperature_takes_the_best_token_at_every_step(masking_policy):
    prompt = _prompts(masking_policy, 1)[0]
    tok = masking_policy.tokenizer
    prompt_ids = list(tok(prompt, add_special_tokens=True)["input_ids"])
    seqs = [tuple(tok(c, add_special_tokens=False)["input_ids"]) + (tok.eos_token_id,) for c in TRIE]
    prefix: tuple[int, ...] = ()
    while prefix not in seqs:
        allowed = sorted({s[len(prefix)] for s in seqs if s[: len(prefix)] == prefix})
        with torch.no_grad():
            logits = masking_policy.model(input_ids=torch.tensor([prompt_ids + list(prefix)])).logits[0, -1]
        prefix += (allowed[int(torch.argmax(logits[allowed]))],)
    greedy = TRIE[seqs.index(prefix)]
    for seed in (1, 2, 3):
        assert masking_policy.sample([prompt], seeds=[seed], temperature=0, candidates=[TRIE])[0].text == greedy


def _scorer(policy, path):
    """A policy on ``policy``'s model scoring candidates by ``path``: ``tree`` (one pass, tree
    attention mask; sdpa), ``tree-eager`` (the same under eager attention), or ``cached`` (the
    fallback for attention without custom masks: prompt cache, then every candidate row)."""
    out = HFPolicy(policy.model, policy.tokenizer, history_length=2, max_action_tokens=6)
    if path == "cached":
        out._tree_attention = False
    return out


@pytest.mark.parametrize("path", ["tree", "tree-eager", "cached"])
@pytest.mark.parametrize("include_stop", [True, False])
@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_score_candidates_equals_scoring_every_pair(policy, path, include_stop, batch_size):
    """The shared-prompt scoring pass gives :meth:`score`'s numbers (full forward pass per pair),
    whatever the prompt lengths, candidate counts and lengths (one-token "look" included, shared
    prefixes, a candidate that is a prefix of another, a repeated candidate), batch size and scoring
    path."""
    scorer = _scorer(policy, path)
    implementation = policy.model.config._attn_implementation
    if path == "tree-eager":
        policy.model.config._attn_implementation = "eager"
    try:
        prompts = _prompts(scorer, 5)
        prompts[1] = prompts[1] + " look look"  # prompts of different lengths: left padding differs
        candidates = [TRIE, ["look"], TRIE[:3], ADMISSIBLE, ["go to desk", "go to desk 1", "look", "go to desk"]]
        got = scorer.score_candidates(prompts, candidates, include_stop=include_stop, batch_size=batch_size)
    finally:
        policy.model.config._attn_implementation = implementation
    for prompt, cands, row in zip(prompts, candidates, got):
        want = policy.score([prompt] * len(cands), list(cands), include_stop=include_stop)
        assert len(row) == len(cands)
        for w, g in zip(want, row):
            assert g.token_ids == w.token_ids
            assert g.token_logprobs == pytest.approx(w.token_logprobs, abs=1e-6)
            if include_stop:
                assert g.stop_logprob == pytest.approx(w.stop_logprob, abs=1e-6)
            else:
                assert g.stop_logprob is None


@pytest.mark.parametrize("path", ["tree", "cached"])
@pytest.mark.parametrize("include_stop", [True, False])
@pytest.mark.parametrize("max_tree_tokens", [1, 40, 4096])
def test_score_shared_prefix_equals_scoring_every_pair(policy, monkeypatch, path, include_stop, max_tree_tokens):
    """Prompts that begin alike (a judge's per-turn prompts: one transcript, then a per-turn cue)
    are scored with :meth:`score`'s numbers (a full forward pass per pair), whatever the suffix
    lengths (a prompt that is all prefix included), candidate counts, and however the tree is
    split into rows; the common beginning is one row's prompt, never fed once per prompt."""
    scorer = _scorer(policy, path)
    body = policy.prompt_builder.build(GOAL, "you see a mug 1 and a desk 1", ADMISSIBLE, [("you arrive", "look")])
    prompts = [body, body + " look", body + " go to desk 2 look look", body + " take mug 1"]
    candidates = [["1", "0", "-1"], ["look"], TRIE, ["go to desk 1", "go to desk 1 look"]]
    widths = []
    original = scorer._forward
    monkeypatch.setattr(scorer, "_forward", lambda ids, *a, **k: widths.append(ids.shape) or original(ids, *a, **k))
    got = scorer.score_shared_prefix(prompts, candidates, include_stop=include_stop, max_tree_tokens=max_tree_tokens)
    for prompt, cands, row in zip(prompts, candidates, got):
        want = policy.score([prompt] * len(cands), list(cands), include_stop=include_stop)
        assert len(row) == len(cands)
        for w, g in zip(want, row):
            assert g.token_ids == w.token_ids
            assert g.token_logprobs == pytest.approx(w.token_logprobs, abs=1e-5)
            if include_stop:
                assert g.stop_logprob == pytest.approx(w.stop_logprob, abs=1e-5)
            else:
                assert g.stop_logprob is None
    n_body = len(scorer.encode_prompt(body))
    if path == "tree":
        rows = sum(shape[0] for shape in widths)
        expected = {1: (len(prompts), len(prompts)), 40: (2, len(prompts) - 1), 4096: (1, 1)}[max_tree_tokens]
        assert expected[0] <= rows <= expected[1]
        # the body is fed once per row, never once per prompt and candidate
        assert all(n_body < shape[1] < 2 * n_body for shape in widths)
    else:  # no tree mask: the prompt-cache path of score_candidates
        assert len(widths) == 2


def test_tree_scoring_is_one_pass_over_each_prompt_and_its_prefix_tree(policy, monkeypatch):
    """Tree scoring feeds one row per prompt: the prompt's tokens and one token per distinct
    candidate prefix (not per candidate token) -- the cost it claims."""
    scorer = _scorer(policy, "tree")
    widths = []
    original = scorer._forward

    def spy(ids, mask, positions, **kwargs):
        widths.append(tuple(ids.shape))
        assert mask.shape == (ids.shape[0], 1, ids.shape[1], ids.shape[1])
        return original(ids, mask, positions, **kwargs)

    monkeypatch.setattr(scorer, "_forward", spy)
    prompt = _prompts(scorer, 1)[0]
    scorer.score_candidates([prompt], [TRIE], include_stop=True)
    tok = scorer.tokenizer
    seqs = [tok(c, add_special_tokens=False)["input_ids"] for c in TRIE]
    prefixes = {tuple(s[: d + 1]) for s in seqs for d in range(len(s))}  # inputs: every proper prefix of action + eos
    n_prompt = len(scorer.encode_prompt(prompt))
    assert widths == [(1, n_prompt + len(prefixes))]
    assert len(prefixes) < sum(len(s) for s in seqs)  # the tree is smaller than the candidates


def test_scoring_memo_scores_a_pair_once_and_changes_nothing(policy, monkeypatch):
    """Inside ``scoring_memo`` a (prompt, candidate) pair already scored costs no forward pass; the
    numbers are those of a memo-less call; nothing is remembered after the block."""
    scorer = _scorer(policy, "tree")
    prompts = _prompts(scorer, 3)
    plain = scorer.score_candidates(prompts, [TRIE] * 3)
    passes = []
    original = scorer._forward
    monkeypatch.setattr(scorer, "_forward", lambda *a, **k: passes.append(a[0].shape) or original(*a, **k))
    with scorer.scoring_memo():
        first = scorer.score_candidates(prompts[:2], [TRIE[:2]] * 2)
        n_first = len(passes)
        with scorer.scoring_memo():  # nested: shares the outer memory
            again = scorer.score_candidates(prompts, [TRIE] * 3)
        n_again = len(passes) - n_first
        repeat = scorer.score_candidates(prompts, [TRIE] * 3)
        assert len(passes) == n_first + n_again  # the repeat was free
    assert n_first == 1 and n_again == 1
    assert passes[1][0] == 3  # the second pass still held all three prompts: prompts 0, 1 had missing candidates
    for row_plain, row_again, row_repeat in zip(plain, again, repeat):
        for a, b, c in zip(row_plain, row_again, row_repeat):
            assert b is c
            assert b.token_logprobs == pytest.approx(a.token_logprobs, abs=1e-6)
    for row_first, row_plain in zip(first, plain[:2]):
        for a, b in zip(row_first, row_plain[:2]):
            assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-6)
    scorer.score_candidates(prompts, [TRIE] * 3)
    assert len(passes) == n_first + n_again + 1  # the memory ended with the block
