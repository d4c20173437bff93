"""ALFWorld on the real ``alfworld`` + ``textworld`` engine.

:mod:`~.env` (the engine wrapper: snapshots, state signature) with :mod:`~.textworld_accel` (the
memoisation of textworld's text generation); :mod:`~.game_files` (reading, finding and loading
game files); the offline game generator :mod:`~.games`, which samples a scene (:mod:`~.scenes`),
writes its PDDL problem and walkthrough (:mod:`~.problems`) and verifies it on the engine; and the
experts (:mod:`~.expert`).
"""

from creditaudit.replay.envs.alfworld.env import AlfworldEnv, AlfworldSnapshot, make_alfworld
from creditaudit.replay.envs.alfworld.expert import (
    ExpertStep,
    expert_action,
    expert_demonstration,
    expert_demonstrations,
    parse_goal,
    search_weights,
)
from creditaudit.replay.envs.alfworld.game_files import game_task, list_game_files, load_tasks, read_game_file
from creditaudit.replay.envs.alfworld.games import (
    GENERATOR_VERSION,
    GeneratedGame,
    GenerationReport,
    generate_games,
)
from creditaudit.replay.envs.alfworld.scenes import TASK_TYPES, floorplans_for
from creditaudit.replay.envs.alfworld.textworld_accel import TESTED_TEXTWORLD, accelerate_textworld, textworld_shortcuts

__all__ = [
    "TASK_TYPES",
    "TESTED_TEXTWORLD",
    "GENERATOR_VERSION",
    "AlfworldEnv",
    "AlfworldSnapshot",
    "ExpertStep",
    "GeneratedGame",
    "GenerationReport",
    "accelerate_textworld",
    "expert_action",
    "expert_demonstration",
    "expert_demonstrations",
    "floorplans_for",
    "game_task",
    "generate_games",
    "list_game_files",
    "load_tasks",
    "make_alfworld",
    "parse_goal",
    "read_game_file",
    "search_weights",
    "textworld_shortcuts",
]
