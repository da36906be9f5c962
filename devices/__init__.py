"""Devices: fleets, policy snapshots, ledgers and the device's own decision; the device SDK in sdk/.

"Seed 000" … "seed 004" in comments name the source documents: docs/privacy.md, References.
"""
