"""An example third-party environment for creditaudit (the environment ``gridworld``).

See :mod:`creditaudit_example_env.gridworld`.
"""

from creditaudit_example_env.gridworld import GridWorld, gridworld_environment, shortest_solution

__all__ = ["GridWorld", "gridworld_environment", "shortest_solution"]
