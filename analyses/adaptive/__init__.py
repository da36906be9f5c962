"""Interactive analyses: chains of rounds where each round is built from the last release.

Two kinds (docs/adaptive.md):

- ``ngram_discovery`` (seed 000, Section 1): round 1 is a histogram over the vocabulary; round r
  asks for the extensions of the frequent (r-1)-grams (a PrefixTree recipe) and keeps those whose
  estimate clears the threshold. It stops at the maximum length, when nothing clears the
  threshold, or when the next round would exceed the budget. A static baseline (every r-gram of
  the target length, hashed into a count-mean sketch, the same per-round privacy over as many
  rounds) can run on a second analysis of the same fleet, and is compared on ground truth.
- ``bucket_refinement``: coarse buckets of a numeric field; every bucket whose estimate clears
  the threshold is split in two, down to the smallest width allowed.

The budget plan (epsilon0, epsilon, delta of every round) is fixed and checked against the policy
at start: a plan that would exceed it is refused and nothing is sent. The chain lives in the
database: each finished round enqueues ``advance_adaptive_run``, which records the level and
starts the next round in one transaction, so a worker restart resumes where it stopped.
"""
