# Reference values for tests/stats/test_association.py::test_partial_corr_reproduces_r_ppcor.
#
# R is not installed where these tests run, and these numbers were NOT produced by running this
# script here: they are the outputs of R ppcor::pcor.test that pingouin publishes as its own test
# reference (pingouin tests/R/test_correlation.R and tests/test_correlation.py, "Compare with the R
# package ppcor"), on pingouin's data set partial_corr.csv, copied beside this script. creditaudit
# computes the partial correlation with pingouin, so pingouin itself cannot be the reference.
#
#   covar               method     estimate   p.value
#   cv1                 pearson    0.5681692  0.001303059
#   cv1, cv2            pearson    0.5344372  0.003392904
#   cv1, cv2, cv3       pearson    0.4926007  0.009044164
#   cv1, cv2, cv3       spearman   0.5209208  0.005336187
library(ppcor)
df <- read.csv("partial_corr.csv")
pcor.test(x = df$x, y = df$y, z = df[, c("cv1")])
pcor.test(x = df$x, y = df$y, z = df[, c("cv1", "cv2")])
pcor.test(x = df$x, y = df$y, z = df[, c("cv1", "cv2", "cv3")])
pcor.test(x = df$x, y = df$y, z = df[, c("cv1", "cv2", "cv3")], method = "spearman")
