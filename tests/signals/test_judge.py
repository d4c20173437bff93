"""Judge credit (TARL): constrained local choice, the HTTP backend against a real local server,
answer parsing, and judge-vs-judge agreement."""

from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from creditaudit.errors import InputError
from creditaudit.signals.families.judge_http import HttpJudge
from creditaudit.signals.families.judge import (
    JudgeFamily,
    LocalJudge,
    MalformedAnswer,
    check_choices,
    constrained_scores,
    judge_agreement,
    judge_prompt,
    parse_judge_answer,
)


# ------------------------------------------------------------------------------ constrained choice


def _brute_force(lp: np.ndarray, k: int) -> float:
    best = -np.inf
    for combo in itertools.product(range(3), repeat=len(lp)):
        if sum(c == 2 for c in combo) <= k:
            best = max(best, sum(lp[i, c] for i, c in enumerate(combo)))
    return best


@pytest.mark.parametrize("k", [0, 1, 2])
def test_constrained_scores_is_the_joint_argmax_under_the_budget(k):
    rng = np.random.default_rng(11)
    for _ in range(30):
        n = int(rng.integers(1, 6))
        lp = np.log(rng.dirichlet(np.ones(3), size=n))
        scores = constrained_scores(lp, max_negative=k)
        col = {1: 0, 0: 1, -1: 2}
        total = sum(lp[i, col[s]] for i, s in enumerate(scores))
        assert scores.count(-1) <= k
        assert total == pytest.approx(_brute_force(lp, k))


def test_constrained_scores_keeps_one_minus_one_when_every_turn_prefers_it():
    lp = np.log([[0.1, 0.1, 0.8], [0.05, 0.05, 0.9], [0.2, 0.1, 0.7]])
    assert constrained_scores(lp, max_negative=1) == [1, -1, 1]


# ------------------------------------------------------------------------------ local backend


@pytest.fixture(scope="module")
def judge_model(judgeable_policy_dir):
    from creditaudit.replay.policies import load_policy

    return load_policy(judgeable_policy_dir, history_length=0)


def test_local_judge_scores_every_turn_validly(judge_model, trajectory_factory, context_factory):
    trajs = [trajectory_factory(f"t-{i}", "task", n_turns=4, seed=i, rollout=i) for i in range(3)]
    family = JudgeFamily(name="judge", backend="local", model="policy")
    protocol = SimpleNamespace(policy=SimpleNamespace(model_files={"config.json": "0" * 64}, tokenizer_files={}))
    out = family.compute(context_factory(trajs, policy=judge_model, protocol=protocol))
    assert out.credit["abstain_reason"].isna().all()
    assert set(out.credit["credit"]) <= {1.0, 0.0, -1.0}
    assert (out.credit.groupby("trajectory_id")["credit"].apply(lambda s: (s == -1).sum()) <= 1).all()
    diag = out.diagnostics.to_pandas()
    assert diag["judge_id"].str.startswith("local:policy@").all()
    assert (diag["parse_outcome"] == "constrained").all() and diag["prompt_sha256"].str.len().eq(64).all()
    assert diag[["logprob_1", "logprob_0", "logprob_minus1"]].notna().all().all()
    assert diag["prompt_sha256"].nunique() == len(diag)  # one prompt per turn
    # the recorded log-probabilities reproduce the scores by constrained choice
    for tid, frame in diag.groupby("trajectory_id", sort=False):
        lp = frame[["logprob_1", "logprob_0", "logprob_minus1"]].to_numpy()
        assert constrained_scores(lp) == frame["score"].tolist()


def test_local_judge_refuses_a_tokenizer_without_the_choices():
    # a word-level tokenizer like the default policy's, whose vocabulary lacks "-"
    from creditaudit.replay.policies.default import SPECIAL_TOKENS, build_tokenizer

    tokenizer = build_tokenizer(list(SPECIAL_TOKENS) + ["0", "1", "open", "door"])
    model = SimpleNamespace(tokenizer=tokenizer)
    with pytest.raises(InputError, match=r"judge model 'local:policy': its tokenizer cannot encode the score "
                                         r"choice\(s\) '-1' \(missing token\(s\): '-'\)"):
        LocalJudge(model, judge_id="local:policy")
    bare = build_tokenizer(list(SPECIAL_TOKENS) + ["open"])
    with pytest.raises(InputError, match=r"'1', '0', '-1' \(missing token\(s\): '1', '0', '-'\)"):
        check_choices(bare, judge="j")


def test_check_choices_accepts_a_tokenizer_with_them(judge_model):
    ids = check_choices(judge_model.tokenizer, judge="x")
    assert len(ids) == 3 and all(ids)


# ------------------------------------------------------------------------------ answers


def test_parse_judge_answer_accepts_valid_json_and_names_every_defect():
    assert parse_judge_answer('{"scores": [1, 0, -1]}', n_turns=3) == [1, 0, -1]
    assert parse_judge_answer('```json\n{"scores": [0, 1.0]}\n```', n_turns=2) == [0, 1]
    cases = {
        "no JSON here": "not JSON",
        '{"score": [1]}': 'no "scores" list',
        '{"scores": [1, 0]}': "2 scores for 3 turns",
        '{"scores": [1, 2, 0]}': "score 1 is 2",
        '{"scores": [true, 0, 0]}': "score 0 is True",
        '{"scores": [-1, -1, 0]}': "2 scores of -1; at most 1 allowed",
    }
    for text, message in cases.items():
        with pytest.raises(MalformedAnswer, match=message.replace("(", r"\(")):
            parse_judge_answer(text, n_turns=3)


def test_judge_prompt_holds_task_trajectory_and_outcome(trajectory_factory):
    traj = trajectory_factory(n_turns=2, seed=3, outcome=0)
    text = judge_prompt(traj)
    assert f"task: {' '.join(traj.goal.split())}" in text
    assert text.count("\nturn ") == 2 and "At most 1 turn(s) may receive -1." in text
    assert "outcome: the task was not completed." in text


# ------------------------------------------------------------------------------ HTTP backend


class _Server:
    """A real OpenAI-compatible endpoint on 127.0.0.1 answering from a script, one entry per request:
    ``("json", scores)``, ``("text", body)``, ``("status", code)``, ``("sleep", seconds)`` or
    ``("retry_after", seconds)`` (HTTP 429 with that ``Retry-After``). ``peak``: the most requests
    it held at once."""

    def __init__(self, script):
        self.script = list(script)
        self.requests: list[dict] = []
        self.inflight = self.peak = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                with server.lock:
                    server.inflight += 1
                    server.peak = max(server.peak, server.inflight)
                try:
                    self._answer()
                finally:
                    with server.lock:
                        server.inflight -= 1

            def _answer(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append({"path": self.path, "body": body, "at": time.monotonic()})
                    kind, value = server.script[min(len(server.requests), len(server.script)) - 1]
                if kind == "sleep":
                    time.sleep(value)
                    kind, value = "json", [0]
                if kind == "sleep_json":  # (seconds, scores)
                    time.sleep(value[0])
                    kind, value = "json", value[1]
                if kind == "retry_after":
                    self.send_response(429)
                    self.send_header("Retry-After", str(value))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if kind == "status":
                    self.send_response(value)
                    self.end_headers()
                    self.wfile.write(b"server says no")
                    return
                content = json.dumps({"scores": value}) if kind == "json" else value
                payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _judge(server, **kw) -> HttpJudge:
    kw.setdefault("max_retries", 2)
    kw.setdefault("timeout_s", 5.0)
    return HttpJudge(server.endpoint, "judge-model", backoff_s=0.0, **kw)


def test_http_judge_good_path(trajectory_factory):
    traj = trajectory_factory(n_turns=3, seed=0)
    with _Server([("json", [1, 0, -1])]) as server:
        verdict = _judge(server).judge(traj)
    assert verdict.scores == [1, 0, -1] and verdict.abstain_reason is None
    assert verdict.parse_outcome == "ok" and verdict.attempts == 1 and len(server.requests) == 1
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["body"]["model"] == "judge-model"
    assert "exactly {\"scores\": [s_0, ..., s_2]}" in request["body"]["messages"][0]["content"]
    assert json.loads(json.loads(verdict.raw_responses[0])["choices"][0]["message"]["content"]) == {"scores": [1, 0, -1]}


def test_http_judge_retries_through_errors_and_garbage_then_parses(trajectory_factory):
    traj = trajectory_factory(n_turns=2, seed=0)
    with _Server([("status", 503), ("text", "sure! the scores are 1 and 0"), ("json", [0, 1])]) as server:
        verdict = _judge(server, max_retries=3).judge(traj)
    assert verdict.scores == [0, 1] and verdict.attempts == 3 and len(server.requests) == 3
    assert verdict.raw_responses[0] == "server says no" and "sure!" in verdict.raw_responses[1]


def test_http_judge_garbage_after_retries_is_a_recorded_abstention(trajectory_factory, context_factory):
    trajs = [trajectory_factory("t-0", n_turns=2, seed=0), trajectory_factory("t-1", n_turns=3, seed=1)]
    with _Server([("json", [-1, -1])]) as server:  # two -1 (and the wrong count for t-1): never valid
        family = JudgeFamily(name="judge", backend="http", model="judge-model", endpoint=server.endpoint,
                             max_retries=2, timeout_s=5.0)
        out = family.compute(context_factory(trajs, overrides={"judge": {"backoff_s": 0.0}}))
    assert len(server.requests) == 2 * 3  # (max_retries + 1) per trajectory, then it stops
    assert out.credit["credit"].isna().all()
    assert (out.credit["abstain_reason"] == "judge_malformed").all()
    diag = out.diagnostics.to_pandas()
    assert diag["parse_outcome"].iloc[0] == "malformed answer: 2 scores of -1; at most 1 allowed"
    assert diag["parse_outcome"].iloc[-1] == "malformed answer: 2 scores for 3 turns"
    assert (diag["attempts"] == 3).all() and diag["raw_responses"].map(len).eq(3).all()
    assert diag["judge_id"].iloc[0] == f"http:judge-model@{server.endpoint}"


def test_http_judge_timeout_is_a_recorded_abstention(trajectory_factory):
    traj = trajectory_factory(n_turns=2, seed=0)
    with _Server([("sleep", 1.0)]) as server:
        verdict = _judge(server, max_retries=1, timeout_s=0.2).judge(traj)
    assert verdict.scores is None and verdict.abstain_reason == "judge_timeout"
    assert verdict.attempts == 2 and len(server.requests) == 2
    assert verdict.raw_responses[0].startswith("<timeout after 0.2 s")


def test_http_judge_unreachable_endpoint_is_a_recorded_abstention(trajectory_factory):
    with _Server([("json", [0])]) as server:
        endpoint = server.endpoint
    verdict = HttpJudge(endpoint, "m", max_retries=1, timeout_s=1.0, backoff_s=0.0).judge(trajectory_factory(n_turns=1))
    assert verdict.scores is None and verdict.abstain_reason == "judge_unreachable" and verdict.attempts == 2


def test_http_judge_refuses_a_wrong_endpoint_or_model(trajectory_factory):
    with _Server([("status", 404)]) as server:
        with pytest.raises(InputError, match=r"answered HTTP 404 for model 'judge-model'.*check the judge's `endpoint`"):
            _judge(server).judge(trajectory_factory(n_turns=1))
        assert len(server.requests) == 1


def test_http_judge_honours_retry_after(trajectory_factory):
    with _Server([("retry_after", 2), ("json", [1, 0])]) as server:
        verdict = _judge(server).judge(trajectory_factory(n_turns=2, seed=0))
    assert verdict.scores == [1, 0] and verdict.attempts == 2 and verdict.raw_responses[0] == ""
    # the client waited what the server asked (its own first backoff is under a second)
    assert server.requests[1]["at"] - server.requests[0]["at"] >= 1.9


def test_http_judge_caches_answers_so_a_resumed_stage_sends_nothing(trajectory_factory, context_factory, tmp_path):
    trajs = [trajectory_factory(f"t-{i}", n_turns=2, seed=i) for i in range(4)]

    def compute():
        family = JudgeFamily(name="judge", backend="http", model="judge-model", endpoint=server.endpoint,
                             max_retries=1, timeout_s=5.0)
        return family.compute(context_factory(trajs, run_dir=tmp_path, overrides={"judge": {"backoff_s": 0.0}}))

    with _Server([("sleep_json", (0.3, [1, 0]))]) as server:
        first = compute()
        sent = len(server.requests)
        again = compute()
    assert sent == 4 and len(server.requests) == 4  # the second computation sent no request
    assert server.peak >= 2  # trajectories were judged concurrently
    assert again.diagnostics.equals(first.diagnostics) and again.credit.equals(first.credit)
    assert len(list((tmp_path / "judge_cache" / "judge").rglob("*.json"))) == 4


def test_http_url_accepts_a_v1_base():
    assert HttpJudge("http://h:1/v1/", "m").url == "http://h:1/v1/chat/completions"
    assert HttpJudge("http://h:1", "m").url == "http://h:1/v1/chat/completions"


# ------------------------------------------------------------------------------ agreement


def test_judge_agreement_uses_turns_both_scored():
    from creditaudit.stats import cohens_kappa

    a = pd.DataFrame({"trajectory_id": ["t"] * 6, "turn": range(6), "credit": [1, 0, 1, -1, 0, 1.0]})
    b = pd.DataFrame({"trajectory_id": ["t"] * 6, "turn": range(6), "credit": [1, 0, 0, -1, np.nan, 1.0]})
    (entry,) = judge_agreement({"a": a, "b": b})
    ref = cohens_kappa([1, 0, 1, -1, 1], [1, 0, 0, -1, 1], categories=(1, 0, -1))
    assert entry["judges"] == ["a", "b"] and entry["n"] == 5
    assert entry["agreement"] == pytest.approx(0.8) and entry["kappa"] == pytest.approx(ref.statistic)
    constant = judge_agreement({"a": a.assign(credit=1.0), "b": b.assign(credit=1.0)})[0]
    assert constant["kappa"] is None and constant["agreement"] == 1.0 and "undefined" in constant["note"]


def test_local_judge_from_a_model_directory_is_identified_by_its_hash(judgeable_policy_dir, tmp_path,
                                                                     trajectory_factory, context_factory):
    import shutil

    shutil.copytree(judgeable_policy_dir, tmp_path / "judge-model")
    family = JudgeFamily(name="judge", backend="local", model="judge-model")
    out = family.compute(context_factory([trajectory_factory(n_turns=2)], run_dir=tmp_path))
    assert out.report["judge_id"].startswith("local:judge-model@") and len(out.report["judge_model_sha256"]) == 64
    assert str(tmp_path) not in out.report["judge_id"]
    assert out.credit["abstain_reason"].isna().all()
