"""The registered ledger producers, one module per stage (importing this package registers them).

- :mod:`.protocol`: the frozen protocol's settings, gate rules, decision order and deviations;
- :mod:`.reference`: the audit paper's published figures the report sets beside this run's;
- :mod:`.collect`: the collection (sizes, success, admissibility, determinism check);
- :mod:`.replay`: replay counters and the measurability map;
- :mod:`.signals`: abstentions, control strength, judge agreement and the confidence router;
- :mod:`.diagnostics`: ProVer's judge-ablation table and VICT's conformance, proof coverage and
  nonzero shares, from their diagnostics tables;
- :mod:`.audit`: fidelity statistics, Holm, verdicts with every gate's trace, fluency echo;
- :mod:`.arms`: the training-arms experiment (only when the run has ``arms/``);
- :mod:`.calibration`: the calibration table (only when the run has ``calibration/``).
"""

from creditaudit.ledger.producers import (  # noqa: F401
    arms, audit, calibration, collect, diagnostics, protocol, reference, replay, signals,
)

__all__: list[str] = []
