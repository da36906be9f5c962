"""The analyst's side: analyses as policy, recipes, rounds, releases, adaptive runs, pages and API.

"Seed 000" … "seed 004" in comments name the source documents: docs/privacy.md, References.
"""
