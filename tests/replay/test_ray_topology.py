"""Replay's Ray topology: environment workers and one policy service, on a real two-node cluster.

The service is first checked without Ray (its queue, its per-worker scoring memory, merging), then
on a cluster started here as a user starts one (``ray start --head`` plus ``ray start --address``),
against the bytes of the in-process executor.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import sha256_file
from creditaudit.replay.policy_service import PolicyService, RemotePolicy
from creditaudit.replay.stage import ROLLOUTS, TURNS, run_replay


def _policy(directory: Path):
    from creditaudit.replay.policies.hf import load_policy

    return load_policy(directory, history_length=0, max_action_tokens=6, decoding="admissible")


def _decision_points(policy, n: int, seed: int) -> tuple[list[str], list[list[str]]]:
    from creditaudit.replay.envs.planted import PlantedEnv

    env = PlantedEnv(n_steps=4, horizon=8)
    prompts, candidates = [], []
    for task in env.make_tasks(n, rng=np.random.default_rng(seed)):
        obs = env.reset(task)
        prompts.append(policy.prompt_builder.build(obs.goal, obs.text, obs.admissible, []))
        candidates.append(list(obs.admissible))
    return prompts, candidates


def _remote(service: PolicyService, session: str) -> RemotePolicy:
    return RemotePolicy(service, session, call=service.call)


# ------------------------------------------------------------------ the service, without Ray


def test_one_request_at_a_time_gives_the_in_process_numbers_bit_for_bit(planted_policy_dir):
    reference = _policy(planted_policy_dir)
    service = PolicyService("", policy=_policy(planted_policy_dir))
    a, b = _remote(service, "worker-a"), _remote(service, "worker-b")
    prompts, candidates = _decision_points(reference, 6, seed=3)
    seeds = list(range(100, 106))
    with reference.scoring_memo():
        expected = [reference.sample(prompts, seeds=seeds, temperature=0.7, candidates=candidates),
                    reference.sample(prompts[2:], seeds=seeds[2:], temperature=0.7, candidates=candidates[2:])]
    passes = lambda: service.service_stats()["forward_passes"]  # noqa: E731
    with a.scoring_memo():
        got_a = [a.sample(prompts, seeds=seeds, temperature=0.7, candidates=candidates)]
        first = passes()
        # another worker's requests come between a's: b has a memory of its own, so it computes
        with b.scoring_memo():
            got_b = b.sample(prompts[2:], seeds=seeds[2:], temperature=0.7, candidates=candidates[2:])
        assert passes() > first
        # a's second request finds every pair in a's memory, as it would in process: no forward pass
        before = passes()
        got_a.append(a.sample(prompts[2:], seeds=seeds[2:], temperature=0.7, candidates=candidates[2:]))
        assert passes() == before
    assert got_a == expected  # dataclass equality: every float bit for bit
    assert got_b == _policy(planted_policy_dir).sample(prompts[2:], seeds=seeds[2:], temperature=0.7,
                                                       candidates=candidates[2:])
    assert a.score(prompts, [c[0] for c in candidates]) == reference.score(prompts, [c[0] for c in candidates])
    # outside the memory block a new block starts empty: the same request computes again
    before = passes()
    with a.scoring_memo():
        a.sample(prompts[2:], seeds=seeds[2:], temperature=0.7, candidates=candidates[2:])
    assert passes() > before
    stats = service.service_stats()
    assert stats["requests"] == stats["policy_calls"] == 5 and stats["sessions"] == 2
    assert stats["mean_rows_per_forward"] >= 1


def test_merged_requests_share_forward_passes_and_agree_to_float_rounding(planted_policy_dir):
    reference = _policy(planted_policy_dir)
    service = PolicyService("", merge=True, policy=_policy(planted_policy_dir))
    workers = 4
    per_worker = [_decision_points(reference, 5, seed=10 + w) for w in range(workers)]
    results: dict[int, list] = {}

    def worker(w: int) -> None:
        prompts, candidates = per_worker[w]
        results[w] = _remote(service, f"worker-{w}").sample(prompts, seeds=list(range(5)), temperature=0.7,
                                                            candidates=candidates)

    with service._serving:  # the model is busy: every worker's request queues, as on a loaded service
        threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
        for t in threads:
            t.start()
        while service.received < workers:
            threading.Event().wait(0.01)
    for t in threads:
        t.join(timeout=120)
    stats = service.service_stats()
    assert stats["requests"] == workers and stats["policy_calls"] == 1  # one call served all four
    for w in range(workers):
        prompts, candidates = per_worker[w]
        alone = reference.sample(prompts, seeds=list(range(5)), temperature=0.7, candidates=candidates)
        assert [r.text for r in results[w]] == [r.text for r in alone]
        got = np.concatenate([r.token_logprobs for r in results[w]])
        want = np.concatenate([r.token_logprobs for r in alone])
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_a_request_the_policy_refuses_reaches_the_worker(planted_policy_dir):
    service = PolicyService("", policy=_policy(planted_policy_dir))
    with pytest.raises(InputError, match="tokenizes to no tokens"):
        _remote(service, "w").score(["prompt"], [""])
    with pytest.raises(ValueError, match="serves"):
        service.call("w", None, "generate", {"prompts": []})
    # the service goes on serving
    assert len(_remote(service, "w").score(["prompt"], ["go"])) == 1


# ------------------------------------------------------------------ Ray: refusals before any work


def _ray():
    ray = pytest.importorskip("ray")
    ray.shutdown()  # a test before may have left this process connected to another instance
    return ray


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_an_unreachable_ray_address_exits_2_at_once_and_writes_nothing(tmp_path, planted_policy_dir):
    from helpers import make_run

    _ray()
    run, _ = make_run(tmp_path, planted_policy_dir)
    before = sorted(p.relative_to(run).as_posix() for p in run.rglob("*"))
    address = f"127.0.0.1:{_free_port()}"
    proc = subprocess.run([sys.executable, "-m", "creditaudit", "replay", "--run", str(run), "--executor", "ray",
                           "--quiet"], env={**os.environ, "RAY_ADDRESS": address}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"RAY_ADDRESS={address}: nothing answers there" in proc.stderr and "ray start --head" in proc.stderr
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*")) == before


# ------------------------------------------------------------------ a real two-node cluster


@pytest.fixture(scope="module")
def two_node_cluster(tmp_path_factory):
    """``ray start --head`` on 127.0.0.1 and a second node joining it (``ray start --address``),
    each with 2 CPUs, token authentication on (Ray's default for ``ray start``) with a token of
    this test's; both stopped afterwards (``ray stop`` stops every Ray process of this machine)."""
    _ray()
    exe = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if exe is None:
        pytest.skip("the `ray` command is not installed")
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "2", "--disable-usage-stats"]
    log = tmp_path_factory.mktemp("ray-cluster")
    try:
        for args in (["--head", "--port", str(port), "--include-dashboard", "false"],
                     ["--address", f"127.0.0.1:{port}"]):
            done = subprocess.run([exe, "start", *args, *common], env=env, capture_output=True, text=True,
                                  timeout=180)
            (log / "ray-start.log").open("a").write(done.stdout + done.stderr)
            assert done.returncode == 0, done.stdout + done.stderr
        yield {"RAY_ADDRESS": f"127.0.0.1:{port}", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": env["RAY_AUTH_TOKEN"]}
    finally:
        subprocess.run([exe, "stop", "--force"], env=env, capture_output=True, timeout=120)


#: Tasks of the cluster test's runs: a work unit is a task's group of trajectories, so every one of
#: its 3 workers gets one only when there are at least 3 tasks.
RAY_TASKS = 4


@pytest.fixture(scope="module")
def inline_reference(tmp_path_factory, planted_policy_dir):
    from helpers import make_run

    run, signer = make_run(tmp_path_factory.mktemp("inline"), planted_policy_dir, n_tasks=RAY_TASKS)
    run_replay(run / "protocol.yaml", signer, executor="inline")
    return run


def _replay_cli(run: Path, env: dict[str, str], workers: int) -> subprocess.CompletedProcess:
    """``creditaudit replay --executor ray`` as a user runs it against the cluster (Ray reads its
    authentication settings from the environment when it is imported, so a new process)."""
    return subprocess.run([sys.executable, "-m", "creditaudit", "replay", "--run", str(run), "--executor", "ray",
                           "--workers", str(workers), "--quiet"], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=600)


def _service_line(out: str) -> dict[str, float]:
    line = next(x for x in out.splitlines() if x.startswith("ray: "))
    m = re.match(r"ray: (\d+) environment workers on (\d+) node\(s\), one policy service: (\d+) requests in "
                 r"(\d+) policy calls, (\d+) forward passes of ([\d.]+) rows on average", line)
    assert m, line
    keys = ("sessions", "worker_nodes", "requests", "policy_calls", "forward_passes", "mean_rows_per_forward")
    return {k: float(v) for k, v in zip(keys, m.groups())} | {"merged": "merged" in line}


@pytest.mark.slow
def test_workers_on_two_nodes_and_one_policy_service_give_the_inline_bytes(two_node_cluster, inline_reference,
                                                                           planted_policy_dir, tmp_path):
    import pyarrow.parquet as pq
    from helpers import make_run

    run, _ = make_run(tmp_path, planted_policy_dir, n_tasks=RAY_TASKS)
    # 3 workers of 1 CPU and the service's 1 CPU need both nodes' 2 CPUs each
    done = _replay_cli(run, two_node_cluster, workers=3)
    assert done.returncode == 0, done.stderr
    report = _service_line(done.stdout)
    assert report["worker_nodes"] == 2  # the cluster's two nodes both ran environment workers
    assert report["sessions"] == 3 and report["requests"] == report["policy_calls"] > 0 and not report["merged"]
    assert report["forward_passes"] > 0
    for rel in (TURNS, ROLLOUTS):
        assert sha256_file(run / rel) == sha256_file(inline_reference / rel), rel

    # merged requests (how many meet depends on timing: the merging itself is tested without Ray
    # above): the same actions and outcomes
    merged, _ = make_run(tmp_path / "merged", planted_policy_dir, n_tasks=RAY_TASKS,
                         sections={"compute": {"merge_requests": True}})
    done = _replay_cli(merged, two_node_cluster, workers=3)
    assert done.returncode == 0, done.stderr
    report = _service_line(done.stdout)
    assert report["merged"] and report["requests"] >= report["policy_calls"] > 0
    got = pq.read_table(merged / ROLLOUTS).to_pandas()
    want = pq.read_table(inline_reference / ROLLOUTS).to_pandas()
    assert (got.actions.map(tuple) == want.actions.map(tuple)).all() and (got.outcome == want.outcome).all()
    turns_got = pq.read_table(merged / TURNS).to_pandas()
    turns_want = pq.read_table(inline_reference / TURNS).to_pandas()
    np.testing.assert_array_equal(turns_got.a_replay, turns_want.a_replay)

    # a policy service asking for a GPU the cluster lacks is refused before any actor waits
    gpu, _ = make_run(tmp_path / "gpu", planted_policy_dir, sections={"compute": {"policy_gpus": 1}})
    done = _replay_cli(gpu, two_node_cluster, workers=1)
    assert done.returncode == 2, done.stderr
    assert "compute.policy_gpus is 1 but the Ray cluster has 0 GPUs" in done.stderr
    assert not list((gpu / "replay").rglob("*.parquet"))
