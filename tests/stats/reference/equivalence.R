# Reference values for tests/stats/test_equivalence.py (TOST, superiority t-tests, MDE).
#
# R is not installed where these tests run, and these numbers were NOT produced by running this
# script here: they are the R outputs recorded, with the calls below, in statsmodels' own test
# suite (statsmodels/stats/tests/test_tost.py for equivalence::tost and t.test on the `clinic`
# data; statsmodels/stats/tests/test_power.py for pwr::pwr.t.test / pwr.t2n.test). This script
# restates those calls so that they can be re-run in R; the test pins the printed numbers.
# creditaudit computes these statistics with statsmodels, so the test must not take statsmodels
# as its reference: R's numbers are the independent one.
library(equivalence)  # tost()
library(pwr)          # pwr.t.test(), pwr.t2n.test()

# `clinic`: columns var1 and var2 of the 30-row data set in statsmodels' test_tost.py
# (rows 1-15 are group 1, rows 16-30 group 2).
var1 <- c(2.84, 2.51, 2.41, 2.95, 3.14, 3.79, 4.14, 3.85, 3.02, 3.45, 5.37, 3.81, 4.19, 3.16, 3.84,
          2.60, 2.82, 2.18, 3.46, 4.01, 3.04, 3.47, 4.06, 2.91, 3.59, 4.51, 3.16, 3.86, 3.31, 3.02)
var2 <- c(4.00, 3.26, 4.14, 3.42, 3.25, 4.34, 4.97, 4.31, 3.11, 3.41, 5.02, 4.21, 4.59, 5.30, 4.32,
          3.76, 3.66, 3.65, 3.60, 3.48, 2.87, 3.24, 3.92, 3.99, 4.21, 4.21, 3.31, 3.61, 2.97, 2.73)
g1 <- 1:15
g2 <- 16:30

# TOST, band +-0.6 (mean_diff, se_diff, df, ci_diff at 1 - 2 alpha, p_value)
str(tost(var1[g1] - var1[g2], eps = 0.6))                      # paired, var1
str(tost(var2[g1] - var2[g2], eps = 0.6))                      # paired, var2
str(tost(var1[g1], var1[g2], eps = 0.6))                       # Welch, var1
str(tost(var2[g1], var2[g2], eps = 0.6))                       # Welch, var2
str(tost(var1[g1], var1[g2], eps = 0.6, var.equal = TRUE))     # pooled, var1
str(tost(var2[g1], var2[g2], eps = 0.6, var.equal = TRUE))     # pooled, var2

# t-tests (statistic, parameter = df, p.value, conf.int)
str(t.test(var1[g1], var1[g2], paired = TRUE))
# (statsmodels recorded this call with the samples the other way round, but the estimate it
# recorded, +0.1646667 = mean(var1[g1] - var1[g2]), and its t = +1.213 fix the direction above)
str(t.test(var1[g1], var1[g2], alternative = "greater"))                         # Welch
str(t.test(var1[g1], var1[g2], mu = 1))                                          # Welch
str(t.test(var1[g1], var1[g2], mu = 1, var.equal = TRUE))                        # pooled

# power of the t-test (two-sided power counts both tails in pwr)
pwr.t.test(d = 0.2, n = 20, sig.level = 0.05, type = "one.sample", alternative = "two.sided")  # 0.1359562887679666
pwr.t.test(d = 0.05, n = 20, sig.level = 0.05, type = "one.sample", alternative = "greater")   # 0.0764888785042198
pwr.t.test(d = -0.2, n = 20, sig.level = 0.05, type = "one.sample", alternative = "less")      # 0.21707518167191
pwr.t.test(d = 1, n = 30, sig.level = 0.05, type = "two.sample", alternative = "two.sided")    # 0.967708258242517
pwr.t.test(d = 0.1, n = 20, sig.level = 0.05, type = "two.sample", alternative = "two.sided")  # 0.06095912465411235
pwr.t.test(d = 1, n = 30, sig.level = 0.05, type = "two.sample", alternative = "greater")      # 0.985459690251624
pwr.t2n.test(d = 0.1, n1 = 20, n2 = 30, sig.level = 0.05, alternative = "two.sided")           # 0.0633081832564667
pwr.t2n.test(d = 0.1, n1 = 20, n2 = 30, sig.level = 0.05, alternative = "greater")             # 0.09623589080917805
