"""The two aggregation servers (leader and helper), the token issuer and the collector.

"Seed 000" … "seed 004" in comments name the source documents: docs/privacy.md, References.
"""
