"""Fixtures of the replay tests: generated ALFWorld games, made once per test session."""

from __future__ import annotations

import numpy as np
import pytest

GAME_SEED = 20261202


@pytest.fixture(scope="session")
def alfworld_games(tmp_path_factory: pytest.TempPathFactory):
    """One verified game of each of the six task types (small rooms, so engine steps are cheap).

    Session-scoped: generating costs about 1-2 s per game on the real engine.
    """
    from creditaudit.replay.envs.alfworld import TASK_TYPES, generate_games

    out = tmp_path_factory.mktemp("alfworld-games")
    report = generate_games(out, task_types=TASK_TYPES, games_per_type=1, max_objects=12, max_receptacles=10,
                            rng=np.random.default_rng(GAME_SEED))
    return report


@pytest.fixture(scope="session")
def alfworld_env():
    """One engine instance shared by the real-engine tests (each test resets it)."""
    from creditaudit.replay.envs.alfworld import AlfworldEnv

    env = AlfworldEnv(horizon=50)
    yield env
    env.close()


@pytest.fixture()
def game_by_type(alfworld_games):
    """``{task_type: GeneratedGame}`` of the session's games."""
    return {g.task_type: g for g in alfworld_games.games}

