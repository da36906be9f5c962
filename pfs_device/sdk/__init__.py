"""The device SDK: a real device's side of PFS Studio, in pure Python (no Django).

It fetches the open rounds of its fleet, decides on each with the same code the simulator runs
(pfs_device.decision: snapshot, query class, checks 1-3 of pfs_device.budget), charges its own ledger
before anything leaves it, encodes and privatizes its value with its own OS randomness
(pfs_device.encode, privacy.mechanisms), splits the report into two shares sealed to the leader and
the helper (pfs_device.report_client), obtains one blind-signed token and uploads anonymously.

    python -m pfs_device.sdk --server URL --credential creds.json --data device.jsonl --once

See docs/devices-sdk.md.
"""
