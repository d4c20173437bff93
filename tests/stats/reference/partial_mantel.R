# Reference values for tests/stats/test_matrices.py, produced with R vegan's mantel.partial
# (and mantel). Run:  Rscript tests/stats/reference/partial_mantel.R
# Produced with R 4.2.2 (Debian r-base-core) and vegan 2.6-4 (Debian r-cran-vegan);
# the numbers printed are pinned in the test, which does not need R at run time.
suppressMessages(library(vegan))

# --- fixed small matrices (n = 7): two Euclidean 2-D distances and a binary design matrix
# (1 = different arm; heavily tied, as the training-arm design matrix is) ----------------------
a <- c(0.0, 1.3, 2.1, 3.7, 4.2, 6.0, 7.5)
b <- c(2.0, 0.5, 3.1, 1.2, 4.4, 0.9, 2.8)
cc <- c(1.0, 3.2, 0.4, 2.5, 1.9, 0.7, 2.2)
arm <- c(1, 1, 2, 2, 3, 3, 3)
x <- dist(cbind(a, b))
y <- dist(cbind(cc, b))
z <- as.dist(outer(arm, arm, function(i, j) as.numeric(i != j)))

# all 7! permutations in lexicographic order (as Python's itertools.permutations(range(7)))
perms <- function(v) {
  if (length(v) == 1) return(matrix(v, 1))
  do.call(rbind, lapply(seq_along(v), function(i) cbind(v[i], perms(v[-i]))))
}
P <- perms(1:7)

show <- function(label, value) cat(sprintf("%s = %.17g\n", label, value))

for (m in c("pearson", "spearman")) {
  res <- mantel.partial(x, y, z, method = m, permutations = P)
  show(sprintf("n7 partial %s statistic", m), res$statistic)
  show(sprintf("n7 partial %s signif (all 5040 perms)", m), res$signif)
  for (k in c(2, 100, 2500, 5040)) show(sprintf("n7 partial %s perm[%d]", m, k), res$perm[k])
  res2 <- mantel(x, y, method = m, permutations = P)
  show(sprintf("n7 mantel %s statistic", m), res2$statistic)
  show(sprintf("n7 mantel %s signif (all 5040 perms)", m), res2$signif)
}

# --- a larger case (n = 12) with many random permutations: p-value reference -------------------
a12 <- c(0.3, 1.1, 1.9, 2.2, 3.4, 3.9, 5.0, 5.2, 6.6, 7.1, 8.3, 9.0)
b12 <- c(1.5, 0.2, 2.7, 0.9, 1.8, 3.3, 0.4, 2.2, 1.1, 3.0, 0.7, 2.5)
c12 <- c(2.1, 2.9, 0.8, 1.7, 2.4, 0.3, 1.4, 3.2, 0.6, 1.9, 2.6, 1.0)
x12 <- dist(cbind(b12, c12))
y12 <- dist(cbind(a12, b12))
z12 <- dist(c12)
set.seed(20260101)
for (m in c("pearson", "spearman")) {
  res <- mantel.partial(x12, y12, z12, method = m, permutations = 99999)
  show(sprintf("n12 partial %s statistic", m), res$statistic)
  show(sprintf("n12 partial %s signif (99999 random perms)", m), res$signif)
}
