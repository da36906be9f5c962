"""The two aggregation servers (leader and helper) and the token issuer: each aggregator's shares,
keys, rules and aggregate shares. The collector that combines and debiases them is analyses/.

"Seed 000" … "seed 004" in comments name the source documents: docs/privacy.md, References.
"""
