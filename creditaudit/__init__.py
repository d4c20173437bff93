"""creditaudit: a preregistered audit of step-level credit assignment in LLM agents.

Does the credit a signal gives a step track what that step actually did to the outcome?
creditaudit answers that against executed counterfactual replays, under a protocol that is
hash-signed and frozen before any data exists.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
