"""Devices on the server: simulated fleets (shards, snapshots, ledgers; shard_answer runs pfs_device's
decision over a shard) and the real devices' enrolment and endpoints. What runs on a device is pfs_device/.

"Seed 000" … "seed 004" in comments name the source documents: docs/privacy.md, References.
"""
