"""In-process policy backend vs the ``openai`` (server) backend on the same policy work.

Regenerate the committed figures (CPU, the tiny planted policy the tests build, ~10 minutes):

    python benchmarks/policy_backend_bench.py --out benchmarks/results/policy_backend_bench.json

Workload: ``--states`` decision points of the planted environment, each with its admissible
commands. Two parts:

* **scoring** (what admissible decoding, the replay's alternatives, HCAPO and the confidence signal
  ask of a policy): every (prompt, candidate) pair's token log-probabilities, by
  ``HFPolicy.score_candidates`` in process and by ``ServerPolicy.score_candidates`` against a server
  with prompt log-probabilities -- ``--endpoint URL --model NAME`` (a vLLM server on a GPU machine),
  or by default the reference completions server of the tests (``tests/replay/policies/
  reference_server.py``: one unpadded forward pass per row, no batching, so on a CPU this measures
  the client, HTTP and the server's per-row cost, not a batched server). Then the same again from
  a new client on the same cache (a resumed stage: no request sent). ``max_abs_diff`` is the
  largest difference of a token log-probability from the in-process one.
* **free decoding** (greedy draws of ``--max-tokens`` tokens): ``HFPolicy.sample`` in process vs
  ``ServerPolicy.generate`` against ``transformers serve`` (skipped with ``--endpoint``).
* **replay** (``--replay-tasks`` tasks x 2 rollouts of the planted environment, the tests' run,
  replayed end to end by ``run_replay``): the in-process backend inline (one process) and on local
  worker processes; the Ray topology (``--executor ray`` on a Ray instance started here: environment
  workers and one policy-service actor), one request at a time and with ``compute.merge_requests``;
  and the ``openai`` backend inline against the reference server. Rollouts per second; for Ray the
  service's requests per second and mean rows per forward pass (its counters), for the server the
  requests the replay sent (entries of the run's response cache). ``identical_to_inline``: whether
  the replay tables' bytes equal the inline run's. Ray's own start is timed apart
  (``ray_init_s_not_counted``); the actors' start and the policy's loading are counted. The
  ``openai`` run's protocol differs in its policy section, so it has other seeds: a workload of the
  same size, not the same rollouts.

``mean_rows_per_request`` is what the client sends per request (``policy.server.batch_size``
rows, or one for a text-only server); a vLLM server's own batch (across concurrent requests) is on
its ``/metrics``. Writes ``--out`` (JSON; no time besides the measured seconds) and prints it.

    python benchmarks/policy_backend_bench.py [--policy DIR] [--states N] [--endpoint URL --model NAME]
        [--batch-size B] [--concurrency C] [--replay-tasks N] [--workers W] [--out FILE]

Needs ``pip install -e '.[all,test]'`` (the ``openai`` client; ``transformers[serving]`` for the
servers).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cmd: list[str], health: str, log: Path) -> subprocess.Popen:
    import httpx

    handle = open(log, "w")
    proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited ({proc.returncode}); see {log}")
        try:
            if httpx.get(health, timeout=2.0).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"server did not answer {health}; see {log}")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _states(builder, n: int):
    import numpy as np

    from creditaudit.replay.envs.planted import PlantedEnv
    from creditaudit.replay.policies import Turn

    env, rng, out = PlantedEnv(n_steps=4, horizon=8), np.random.default_rng(17), []
    for task in env.make_tasks(n, rng=rng):
        obs = env.reset(task)
        text, admissible, history = obs.text, list(obs.admissible), []
        for _ in range(3):
            out.append((builder.build(obs.goal, text, admissible, history), admissible))
            action = admissible[int(rng.integers(len(admissible)))]
            result = env.step(action)
            history.append(Turn(text, action))
            text, admissible = result.text, list(result.admissible)
            if result.done or len(out) >= n:
                break
        if len(out) >= n:
            break
    return out[:n]


def _replay_part(directory: Path, work: Path, endpoint: str, n_tasks: int, workers: int) -> dict:
    """The same replay workload on every backend and topology (see the module docstring)."""
    import pyarrow.parquet as pq

    sys.path.insert(0, str(REPO / "tests"))
    from helpers import make_run

    from creditaudit.protocol.canonical import sha256_file
    from creditaudit.replay.stage import ROLLOUTS, TURNS, run_replay

    out: dict = {"tasks": n_tasks, "group_size": 2, "workers": workers}
    server_policy = {"source": "openai", "path": "policy", "model_files": {}, "tokenizer_files": {},
                     "chat_template_sha256": None, "history_length": 0, "max_action_tokens": 6,
                     "decoding": "admissible", "server": {"endpoint": endpoint, "model": "policy", "batch_size": 16}}
    setups = [
        ("in_process_inline", "inline", {}),
        ("in_process_local_workers", "local", {}),
        ("ray_policy_service", "ray", {}),
        ("ray_policy_service_merged", "ray", {"compute": {"merge_requests": True}}),
        ("openai_inline", "inline", {"policy": server_policy}),
    ]
    reference = None
    for name, executor, sections in setups:
        run, signer = make_run(work / name, directory, n_tasks=n_tasks, group=2, sections=sections)
        cache = run / "policy_cache"
        cached_before = len(list(cache.rglob("*.json"))) if cache.exists() else 0
        ray_init_s = None
        if executor == "ray":  # a fresh Ray instance, started outside the timed replay
            import ray

            ray.shutdown()
            start = time.perf_counter()
            ray.init(num_cpus=workers + 1, include_dashboard=False, log_to_driver=False)
            ray_init_s = round(time.perf_counter() - start, 2)
        print(f"replay: {name} ...", flush=True)
        start = time.perf_counter()
        summary = run_replay(run / "protocol.yaml", signer, executor=executor, workers=workers)
        seconds = time.perf_counter() - start
        digest = tuple(sha256_file(run / rel) for rel in (TURNS, ROLLOUTS))
        outcomes = pq.read_table(run / ROLLOUTS).column("outcome").to_pylist()
        if reference is None:
            reference = (digest, outcomes)
        row = {"seconds": round(seconds, 2), "rollouts": summary.n_rollouts,
               "rollouts_per_s": round(summary.n_rollouts / seconds, 2)}
        if name.startswith("openai"):
            # its policy section gives the run another protocol id, so other seeds: another draw of
            # trajectories of the same size, not the same rollouts
            row["workload"] = "same size, another protocol id (other seeds)"
        else:
            row.update(identical_to_inline=digest == reference[0], same_outcomes_as_inline=outcomes == reference[1])
        if ray_init_s is not None:
            row["ray_init_s_not_counted"] = ray_init_s
        report = summary.executor_report
        if report.get("policy_service") == "in-process actor":
            row.update(requests=report["requests"], requests_per_s=round(report["requests"] / seconds, 2),
                       policy_calls=report["policy_calls"], forward_passes=report["forward_passes"],
                       mean_rows_per_forward=round(report["mean_rows_per_forward"], 2),
                       service_busy_share=round(report["busy_s"] / seconds, 3))
        if name.startswith("openai"):
            sent = len(list(cache.rglob("*.json"))) - cached_before
            row.update(requests=sent, requests_per_s=round(sent / seconds, 2))
        if executor == "ray":
            import ray

            ray.shutdown()
        out[name] = row
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=Path, default=None, help="a policy directory (default: build the tests' tiny one)")
    parser.add_argument("--states", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=6)
    parser.add_argument("--endpoint", default=None, help="a server with prompt log-probs (default: the reference server)")
    parser.add_argument("--model", default=None, help="the served model's name (with --endpoint)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--replay-tasks", type=int, default=24, help="tasks of the replay part (0: skip it)")
    parser.add_argument("--workers", type=int, default=2, help="workers of the replay part (local, Ray)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "policy_backend_bench.json")
    args = parser.parse_args(argv)

    from creditaudit.replay.policies import load_policy
    from creditaudit.replay.policies.hf import load_tokenizer
    from creditaudit.replay.policies.server import ServerPolicy

    work = Path(tempfile.mkdtemp(prefix="policy-backend-bench-"))
    procs: list[subprocess.Popen] = []
    try:
        directory = args.policy
        if directory is None:
            sys.path.insert(0, str(REPO / "tests"))
            from helpers import train_planted_policy

            directory = work / "policy"
            print("building the tests' tiny planted policy ...", flush=True)
            train_planted_policy(directory)
        local = load_policy(directory, decoding="admissible", history_length=2)
        rows = _states(local.prompt_builder, args.states)
        prompts, cands = [p for p, _ in rows], [c for _, c in rows]
        n_pairs = sum(len(c) for c in cands)

        start = time.perf_counter()
        inproc = local.score_candidates(prompts, cands)
        t_local = time.perf_counter() - start

        endpoint, model, server_name = args.endpoint, args.model, "given"
        if endpoint is None:
            port = _free_port()
            procs.append(_start([sys.executable, str(REPO / "tests/replay/policies/reference_server.py"), str(directory),
                                 str(port)], f"http://127.0.0.1:{port}/health", work / "reference.log"))
            endpoint, model, server_name = f"http://127.0.0.1:{port}/v1", "policy", "reference (tests)"

        def client(cache: Path | None) -> ServerPolicy:
            return ServerPolicy(load_tokenizer(Path(directory)), endpoint=endpoint, model=model, history_length=2,
                                decoding="admissible", batch_size=args.batch_size, max_concurrency=args.concurrency,
                                cache_dir=cache)

        remote = client(work / "cache")
        start = time.perf_counter()
        served = remote.score_candidates(prompts, cands)
        t_remote = time.perf_counter() - start
        diff = max(abs(x - y) for a_row, b_row in zip(served, inproc) for a, b in zip(a_row, b_row)
                   for x, y in zip(a.token_logprobs + (a.stop_logprob,), b.token_logprobs + (b.stop_logprob,)))
        stats = dict(remote.stats)
        resumed = client(work / "cache")
        start = time.perf_counter()
        resumed.score_candidates(prompts, cands)
        t_resumed = time.perf_counter() - start

        result = {
            "workload": {"states": len(prompts), "pairs_scored": n_pairs, "policy": "tests' tiny planted policy"
                         if args.policy is None else str(args.policy), "batch_size": args.batch_size,
                         "max_concurrency": args.concurrency},
            "scoring": {
                "in_process": {"seconds": round(t_local, 3), "pairs_per_s": round(n_pairs / t_local, 1)},
                "openai": {"server": server_name, "logprob_mode": remote.logprob_mode, "seconds": round(t_remote, 3),
                           "requests": stats["requests"], "requests_per_s": round(stats["requests"] / t_remote, 1),
                           "pairs_per_s": round(n_pairs / t_remote, 1),
                           "mean_rows_per_request": round(stats["rows"] / max(stats["requests"], 1), 2),
                           "max_abs_diff": float(f"{diff:.3g}")},
                "openai_resumed_from_cache": {"seconds": round(t_resumed, 3), "requests": resumed.stats["requests"],
                                              "cache_hits": resumed.stats["cache_hits"]},
            },
        }

        if args.endpoint is None:
            free = load_policy(directory, decoding="free", history_length=2, max_action_tokens=args.max_tokens)
            seeds = list(range(len(prompts)))
            start = time.perf_counter()
            expected = free.sample(prompts, seeds=seeds, temperature=0.0)
            t_free = time.perf_counter() - start
            port = _free_port()
            procs.append(_start([sys.executable, "-c", "from transformers.cli.transformers import main; main()", "serve",
                                 str(directory), "--host", "127.0.0.1", "--port", str(port)],
                                f"http://127.0.0.1:{port}/health", work / "transformers-serve.log"))
            ts = ServerPolicy(load_tokenizer(Path(directory)), endpoint=f"http://127.0.0.1:{port}/v1", model=str(directory),
                              history_length=2, decoding="free", max_concurrency=args.concurrency)
            ts.generate(prompts[:1], seeds=[0], temperature=0.0, max_tokens=args.max_tokens)  # warm-up, form detection
            ts.stats.update(requests=0, rows=0)
            start = time.perf_counter()
            drawn = ts.generate(prompts, seeds=seeds, temperature=0.0, max_tokens=args.max_tokens)
            t_ts = time.perf_counter() - start
            same = sum("".join(t.split("\n", 1)[0].split()) == "".join(e.text.split()) for (t, _), e in zip(drawn, expected))
            result["free_decoding"] = {
                "in_process": {"seconds": round(t_free, 3), "rows_per_s": round(len(prompts) / t_free, 1)},
                "transformers_serve": {"seconds": round(t_ts, 3), "requests": ts.stats["requests"],
                                       "requests_per_s": round(ts.stats["requests"] / t_ts, 1),
                                       "mean_rows_per_request": round(ts.stats["rows"] / max(ts.stats["requests"], 1), 2),
                                       "prompt_form": ts.prompt_form, "greedy_equal_to_in_process": f"{same}/{len(prompts)}"},
            }
        if args.replay_tasks and args.endpoint is None:
            result["replay"] = _replay_part(Path(directory), work, endpoint, args.replay_tasks, args.workers)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        print(json.dumps(result, indent=2, sort_keys=True))
    finally:
        for proc in procs:
            _stop(proc)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
