"""creditaudit.stats — every statistic the fidelity audit and the training-arm analysis use.

Each function takes its data positionally and its options as keywords, validates them in a
private ``_..._iv`` function, and returns a frozen result that carries its evidence (statistic,
p-value, null or bootstrap distribution, counts, method) with ``.to_frame()`` for notebooks.
Every random function takes ``rng`` (pass a named stream from
:func:`creditaudit.protocol.seeds.rng`).

Modules: :mod:`~creditaudit.stats.bootstrap` (cluster bootstrap), :mod:`~creditaudit.stats.rank`
(within-group Spearman), :mod:`~creditaudit.stats.proportions` (Wilson, Holm, sign agreement, resolution bound),
:mod:`~creditaudit.stats.equivalence` (TOST, superiority, MDE, readings),
:mod:`~creditaudit.stats.association` (partial correlation, standardised OLS, kappa),
:mod:`~creditaudit.stats.divergence` (Jensen-Shannon), :mod:`~creditaudit.stats.matrices`
(partition test, Mantel, partial Mantel). Importing the package registers every statistic
as a factory of kind ``"statistic"`` (:mod:`~creditaudit.stats.registered`), so a protocol can
freeze a statistic with its options and the ledger can rebuild it. The audit's own metric, the
precision-at-pivotal lift, lives in :mod:`creditaudit.audit.metrics`.

The numbers come from the libraries the toolkit depends on wherever one computes them —
statsmodels (t-tests, TOST, Holm, Wilson, Cohen's kappa, OLS), scipy (Jensen-Shannon, the
noncentral t of the MDE, ranks), pingouin (partial correlation), scikit-bio (the Mantel
statistic) — wrapped in frozen results; each module's docstring says which, and what is
hand-written because no library offers it (the cluster bootstrap with counted degenerate
resamples, the within-group Spearman, the permutation engine of the partition test and of the
(partial) Mantel tests, the TOST power). Imports of those libraries are deferred to the call,
so importing :mod:`creditaudit.stats` stays light.
"""

from creditaudit.stats.association import (
    KappaResult,
    OLSResult,
    PartialCorrResult,
    cohens_kappa,
    ols_standardized,
    partial_corr,
)
from creditaudit.stats.bootstrap import BootstrapResult, cluster_bootstrap
from creditaudit.stats.divergence import JSDivergenceResult, js_divergence, js_divergence_matrix
from creditaudit.stats.equivalence import (
    READINGS,
    SuperiorityResult,
    TostResult,
    equivalence_reading,
    superiority_ind,
    superiority_paired,
    tost_ind,
    tost_paired,
)
from creditaudit.stats.power import MDEResult, mde
from creditaudit.stats.matrices import MantelResult, PartitionTestResult, mantel, partial_mantel, partition_test
from creditaudit.stats.proportions import (
    HolmResult,
    SignAgreementResult,
    WilsonResult,
    holm,
    resolution_bound,
    sign_agreement,
    wilson,
)
from creditaudit.stats.rank import GroupSpearmanResult, MedianSpearmanResult, group_spearman, median_spearman
from creditaudit.stats.registered import REGISTERED, ConfiguredStatistic

__all__ = [
    # bootstrap
    "BootstrapResult",
    "cluster_bootstrap",
    # rank fidelity
    "GroupSpearmanResult",
    "MedianSpearmanResult",
    "group_spearman",
    "median_spearman",
    # proportions and multiplicity
    "WilsonResult",
    "HolmResult",
    "SignAgreementResult",
    "wilson",
    "holm",
    "sign_agreement",
    "resolution_bound",
    # equivalence
    "READINGS",
    "TostResult",
    "SuperiorityResult",
    "MDEResult",
    "tost_paired",
    "tost_ind",
    "superiority_paired",
    "superiority_ind",
    "mde",
    "equivalence_reading",
    # association
    "PartialCorrResult",
    "OLSResult",
    "KappaResult",
    "partial_corr",
    "ols_standardized",
    "cohens_kappa",
    # distributions and matrices
    "JSDivergenceResult",
    "js_divergence",
    "js_divergence_matrix",
    "PartitionTestResult",
    "MantelResult",
    "partition_test",
    "mantel",
    "partial_mantel",
    # named factories (kind "statistic")
    "REGISTERED",
    "ConfiguredStatistic",
]
