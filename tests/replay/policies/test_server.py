"""The `openai` policy backend (ServerPolicy) against real servers on this machine.

Two servers, both real HTTP over a socket:

* ``transformers serve`` (the kept OpenAI-compatible server that runs the tiny policy on CPU): the
  served-model pin, seeded draws (greedy draws equal the in-process backend's), the cache, and the
  errors. It does not return log-probabilities: its /v1/completions ignores ``echo`` and
  ``logprobs`` (``UNUSED_LEGACY_COMPLETION_FIELDS``) and answers ``logprobs: null``, and rejects
  ``prompt_logprobs`` (422), which the backend reports as an InputError.
* a reference completions server (``reference_server.py``, FastAPI, this repository) that answers the two
  log-prob protocols the backend speaks -- OpenAI ``echo`` + ``logprobs`` + ``max_tokens: 0`` and
  vLLM's ``prompt_logprobs`` -- from one unpadded forward pass of the same model, and can answer
  429 + Retry-After or a malformed log-prob on demand. vLLM, the smallest kept server with these
  fields, has no CPU wheel on PyPI.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from creditaudit.errors import InputError

openai = pytest.importorskip("openai", reason="the `openai` client is not installed (pip install 'creditaudit[server]')")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, proc: subprocess.Popen, seconds: float = 240.0) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {proc.stdout.read() if proc.stdout else ''}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"server did not answer {url} within {seconds}s")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def transformers_server(planted_policy_dir):
    pytest.importorskip("fastapi", reason="`transformers serve` needs fastapi (pip install 'creditaudit[server]')")
    pytest.importorskip("uvicorn", reason="`transformers serve` needs uvicorn (pip install 'creditaudit[server]')")
    port = _free_port()
    log = open(planted_policy_dir.parent / f"transformers-serve-{port}.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from transformers.cli.transformers import main; main()", "serve",
         str(planted_policy_dir), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    try:
        _wait(f"http://127.0.0.1:{port}/health", proc)
        yield f"http://127.0.0.1:{port}/v1", str(planted_policy_dir)
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def reference_server(planted_policy_dir):
    pytest.importorskip("fastapi", reason="the reference server needs fastapi (pip install 'creditaudit[server]')")
    pytest.importorskip("uvicorn", reason="the reference server needs uvicorn (pip install 'creditaudit[server]')")
    port = _free_port()
    script = Path(__file__).with_name("reference_server.py")
    log = open(planted_policy_dir.parent / f"reference-server-{port}.log", "w+")
    proc = subprocess.Popen([sys.executable, str(script), str(planted_policy_dir), str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait(f"http://127.0.0.1:{port}/health", proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)


def _server_policy(endpoint, directory, model, **kwargs):
    from creditaudit.replay.policies.hf import load_tokenizer
    from creditaudit.replay.policies.server import ServerPolicy

    return ServerPolicy(load_tokenizer(Path(directory)), endpoint=endpoint, model=model, max_retries=kwargs.pop("max_retries", 2),
                        timeout_s=60.0, **kwargs)


def _prompts(policy, n=6):
    import numpy as np

    from creditaudit.replay.envs.planted import PlantedEnv

    env = PlantedEnv(n_steps=4, horizon=8)
    out = []
    for task in env.make_tasks(n, rng=np.random.default_rng(5)):
        obs = env.reset(task)
        out.append((policy.prompt_builder.build(obs.goal, obs.text, obs.admissible, []), list(obs.admissible)))
    return out


# ------------------------------------------------------------------ errors without a server


def test_server_down_is_an_input_error_saying_what_to_do(planted_policy_dir):
    endpoint = f"http://127.0.0.1:{_free_port()}/v1"
    with pytest.raises(InputError, match=r"no answer to GET /models.*start the server.*policy.server.endpoint"):
        _server_policy(endpoint, planted_policy_dir, "policy", max_retries=0)


def test_missing_key_variable_is_an_input_error(planted_policy_dir, monkeypatch):
    from creditaudit.protocol.schema import PolicyServer
    from creditaudit.replay.policies.server import load_server_policy

    monkeypatch.delenv("CREDITAUDIT_TEST_KEY", raising=False)
    server = PolicyServer(endpoint="http://127.0.0.1:9/v1", model="m", api_key_env="CREDITAUDIT_TEST_KEY")
    with pytest.raises(InputError, match=r"CREDITAUDIT_TEST_KEY.*not set.*export CREDITAUDIT_TEST_KEY"):
        load_server_policy(planted_policy_dir, server)


def test_protocol_requires_a_server_section_for_openai():
    from pydantic import ValidationError

    from creditaudit.protocol.schema import PolicySection

    with pytest.raises(ValidationError, match="set policy.server"):
        PolicySection(source="openai")
    section = PolicySection(source="openai", server={"endpoint": "http://h:1/v1", "model": "m"})
    assert section.server.bit_reproducible is False
    # where the server is and how it is reached does not enter the protocol id; what it serves does
    from creditaudit.protocol.schema import identity_dict

    moved = PolicySection(source="openai", server={"endpoint": "http://other:2/v1", "model": "m", "batch_size": 3})
    assert identity_dict(moved) == identity_dict(section)
    assert identity_dict(PolicySection(source="openai", server={"endpoint": "http://h:1/v1", "model": "m2"})) \
        != identity_dict(section)
    with pytest.raises(ValidationError, match="set source: openai"):
        PolicySection(source="local", server={"endpoint": "http://h:1/v1", "model": "m"})


# ------------------------------------------------------------------ transformers serve


@pytest.mark.slow
def test_transformers_serve_pins_the_served_model_and_refuses_another_name(transformers_server, planted_policy_dir):
    endpoint, model = transformers_server
    policy = _server_policy(endpoint, planted_policy_dir, model)
    assert policy.served["id"] == model
    with pytest.raises(InputError, match=r"serves .* not policy.server.model 'no-such-model'"):
        _server_policy(endpoint, planted_policy_dir, "no-such-model")
    with pytest.raises(InputError, match=r"protocol pins policy.server.served"):
        _server_policy(endpoint, planted_policy_dir, model, served={**policy.served, "owned_by": "someone-else"})


@pytest.mark.slow
def test_transformers_serve_has_no_logprobs_and_says_so(transformers_server, planted_policy_dir):
    endpoint, model = transformers_server
    policy = _server_policy(endpoint, planted_policy_dir, model)
    (prompt, admissible), *_ = _prompts(policy, 1)
    with pytest.raises(InputError, match=r"neither `echo` \+ `logprobs`.*`prompt_logprobs`.*vllm serve") as info:
        policy.score([prompt], [admissible[0]])
    # exactly what it lacks: token-id prompts (400), `prompt_logprobs` (422); `echo`/`logprobs` it ignores
    assert "prompt must be a string" in str(info.value) and "Unexpected fields" in str(info.value)
    assert policy.logprob_mode is None


@pytest.mark.slow
def test_transformers_serve_greedy_draws_equal_in_process_and_seeds_repeat(transformers_server, planted_policy_dir, tmp_path):
    from creditaudit.replay.policies import load_policy

    endpoint, model = transformers_server
    local = load_policy(planted_policy_dir, decoding="free")
    policy = _server_policy(endpoint, planted_policy_dir, model, cache_dir=tmp_path / "cache")
    prompts = [p for p, _ in _prompts(policy, 6)]
    seeds = list(range(len(prompts)))
    greedy = policy.generate(prompts, seeds=seeds, temperature=0.0)
    assert policy.prompt_form == "text"  # it takes text prompts only ("prompt must be a string")
    expected = [s.text for s in local.sample(prompts, seeds=seeds, temperature=0.0)]
    # the same tokens; the server's detokenizer joins this word-level vocabulary without spaces
    assert ["".join(t.split("\n", 1)[0].split()) for t, _ in greedy] == ["".join(e.split()) for e in expected]
    # the server's own generator, seeded per request: the same seed draws the same text
    first = _server_policy(endpoint, planted_policy_dir, model).generate(prompts, seeds=seeds, temperature=1.5)
    again = _server_policy(endpoint, planted_policy_dir, model).generate(prompts, seeds=seeds, temperature=1.5)
    assert first == again
    other = _server_policy(endpoint, planted_policy_dir, model).generate(prompts, seeds=[s + 100 for s in seeds],
                                                                          temperature=1.5)
    assert other != first
    # a resumed stage (a new policy object on the same cache) sends nothing
    sent = policy.stats["requests"]
    assert sent == len(prompts)  # answered requests (the refused token-id try is not counted)
    resumed = _server_policy(endpoint, planted_policy_dir, model, cache_dir=tmp_path / "cache")
    resumed.prompt_form = "text"
    assert resumed.generate(prompts, seeds=seeds, temperature=0.0) == greedy
    assert resumed.stats["requests"] == 0 and resumed.stats["cache_hits"] == len(prompts)


# ------------------------------------------------------------------ the log-prob protocols


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["echo", "prompt_logprobs"])
def test_logprobs_equal_in_process_to_1e4(reference_server, planted_policy_dir, mode, tmp_path):
    from creditaudit.replay.policies import load_policy

    local = load_policy(planted_policy_dir, decoding="admissible")
    model = "policy" if mode == "echo" else "policy-vllm"  # the reference server answers vLLM's shape for this name
    policy = _server_policy(reference_server, planted_policy_dir, model, decoding="admissible", batch_size=4,
                            max_concurrency=3, cache_dir=tmp_path / "cache", record_dir=tmp_path)
    rows = _prompts(policy, 6)
    prompts, cands = [p for p, _ in rows], [c for _, c in rows]
    served = policy.score_candidates(prompts, cands)
    assert policy.logprob_mode == mode
    inproc = local.score_candidates(prompts, cands)
    for a_row, b_row in zip(served, inproc):
        for a, b in zip(a_row, b_row):
            assert a.token_ids == b.token_ids
            assert max(abs(x - y) for x, y in zip(a.token_logprobs, b.token_logprobs)) < 1e-4
            assert abs(a.stop_logprob - b.stop_logprob) < 1e-4
    hind = policy.score(prompts, [c[0] for c in cands])
    ref = local.score(prompts, [c[0] for c in cands])
    assert max(abs(a.mean_logprob - b.mean_logprob) for a, b in zip(hind, ref)) < 1e-4
    # a row repeated in one call is sent once and its repeats share its numbers
    sent = policy.stats["rows"]
    again = policy.score([prompts[0] + "\n"] * 3, [cands[0][-1]] * 3)
    assert again[0] == again[1] == again[2] and policy.stats["rows"] == sent + 1
    # admissible decoding draws here with the row's seed: the same actions as in process
    seeds = [11, 12, 13, 14, 15, 16]
    got = policy.sample(prompts, seeds=seeds, temperature=0.7, candidates=cands)
    want = local.sample(prompts, seeds=seeds, temperature=0.7, candidates=cands)
    assert [s.text for s in got] == [s.text for s in want]
    # batched: 6 prompts' candidates in requests of 4 rows
    assert policy.stats["rows"] / policy.stats["requests"] > 1
    import json

    assert json.loads((tmp_path / "policy_server.json").read_text())["logprob_mode"] == mode


@pytest.mark.slow
def test_retry_after_is_honoured_and_malformed_logprobs_name_the_request(reference_server, planted_policy_dir):
    import httpx

    policy = _server_policy(reference_server, planted_policy_dir, "policy")
    (prompt, admissible), *_ = _prompts(policy, 1)
    httpx.post(reference_server.rsplit("/v1", 1)[0] + "/control", json={"fail_next": 2}).raise_for_status()
    start = time.monotonic()
    policy.score([prompt], [admissible[0]])  # two 429s with Retry-After: 1, then the answer
    assert time.monotonic() - start >= 1.8
    broken = _server_policy(reference_server, planted_policy_dir, "policy-broken")
    with pytest.raises(InputError, match=r"request [0-9a-f]{12}, prompt 0 .*log-prob .*not a finite number"):
        broken.score([prompt], [admissible[0]])
    with pytest.raises(InputError, match=r"refused .*429"):
        httpx.post(reference_server.rsplit("/v1", 1)[0] + "/control", json={"fail_next": 5}).raise_for_status()
        _server_policy(reference_server, planted_policy_dir, "policy", max_retries=1).score([prompt + " x"], ["a"])
    httpx.post(reference_server.rsplit("/v1", 1)[0] + "/control", json={"fail_next": 0}).raise_for_status()
    # a wrong key: exit 2 naming the variable to fix; the right one is taken
    with pytest.raises(InputError, match=r"refused the API key from the environment variable POLICY_KEY .*401"):
        _server_policy(reference_server, planted_policy_dir, "policy", api_key="wrong", api_key_env="POLICY_KEY")
    assert _server_policy(reference_server, planted_policy_dir, "policy", api_key="right-key").served["id"] == "policy"


@pytest.mark.slow
def test_a_run_collects_through_the_server_and_records_it(reference_server, planted_policy_dir,
                                                                            tmp_path):
    import json

    import pyarrow.parquet as pq
    from helpers import make_run

    from creditaudit.protocol.lock import require_frozen
    from creditaudit.replay.collect import TRAJECTORIES, load_run_policy
    from creditaudit.replay.policies.server import ServerPolicy

    policy = {"source": "openai", "path": "policy", "model_files": {}, "tokenizer_files": {},
              "chat_template_sha256": None, "history_length": 0, "max_action_tokens": 6, "decoding": "admissible", "server": {"endpoint": reference_server, "model": "policy", "batch_size": 8}}
    run, signer = make_run(tmp_path, planted_policy_dir, sections={"policy": policy})
    record = json.loads((run / "policy_server.json").read_text())
    assert record["logprob_mode"] == "echo" and record["served"]["id"] == "policy" and not record["bit_reproducible"]
    assert "api_key" not in json.dumps(record)
    table = pq.read_table(run / TRAJECTORIES).to_pandas()
    assert len(table) > 0
    assert list(run.joinpath("policy_cache").rglob("*.json"))
    # the frozen protocol pins the server section, and loading the run's policy gives the server backend
    frozen = require_frozen(run / "protocol.yaml")
    assert frozen.protocol.policy.server.model == "policy"
    lock = json.loads((run / "protocol.lock.json").read_text())
    assert lock["protocol"]["policy"]["server"]["bit_reproducible"] is False  # the lock says so
    again = load_run_policy(frozen)
    assert isinstance(again, ServerPolicy) and again.served == record["served"]
    # replay (alternatives drawn and scored) and the policy-reading signals run through it too
    from creditaudit.replay.stage import run_replay
    from creditaudit.signals.stage import run_signals

    # on Ray (a local instance): environment workers, each a client of the one server
    ray = pytest.importorskip("ray")
    ray.shutdown()
    try:
        summary = run_replay(run / "protocol.yaml", signer, executor="ray", workers=2)
    finally:
        ray.shutdown()
    assert summary.n_rollouts > 0 and summary.divergences == 0
    assert summary.executor_report["policy_service"] == "openai server"
    inline, inline_signer = make_run(tmp_path / "inline", planted_policy_dir, sections={"policy": policy})
    run_replay(inline / "protocol.yaml", inline_signer, executor="inline")
    assert (pq.read_table(run / "replay" / "rollouts.parquet").column("outcome")
            == pq.read_table(inline / "replay" / "rollouts.parquet").column("outcome"))
    run_signals(run / "protocol.yaml", signer)


@pytest.mark.slow
def test_collect_with_the_server_down_exits_2_saying_what_to_do(planted_policy_dir, tmp_path, capsys, monkeypatch):
    from helpers import make_run

    from creditaudit.cli import main

    policy = {"source": "openai", "path": "policy", "model_files": {}, "tokenizer_files": {},
              "chat_template_sha256": None, "history_length": 0, "max_action_tokens": 6, "decoding": "admissible",
              "server": {"endpoint": f"http://127.0.0.1:{_free_port()}/v1", "model": "policy", "max_retries": 0}}
    run, _ = make_run(tmp_path, planted_policy_dir, sections={"policy": policy}, collect_now=False)
    with pytest.raises(SystemExit) as info:
        main(["collect", "--run", str(run), "--quiet"])
    assert info.value.code == 2
    assert "start the server" in capsys.readouterr().err
    # a key variable that is not set: exit 2 too
    policy["server"].update(api_key_env="CREDITAUDIT_NO_SUCH_KEY")
    monkeypatch.delenv("CREDITAUDIT_NO_SUCH_KEY", raising=False)
    run2, _ = make_run(tmp_path / "keyed", planted_policy_dir, sections={"policy": policy}, collect_now=False)
    with pytest.raises(SystemExit) as info:
        main(["collect", "--run", str(run2), "--quiet"])
    assert info.value.code == 2
    assert "export CREDITAUDIT_NO_SUCH_KEY" in capsys.readouterr().err
