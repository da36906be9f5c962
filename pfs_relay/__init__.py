"""The Oblivious HTTP relay (RFC 9458): a third party between the devices and the leader.

A device seals its upload to the leader's gateway key and sends the capsule here; the relay
forwards it to the one gateway it is configured with, with nothing of the device's (no address,
no header), and returns the sealed answer. It sees the device's address and ciphertext; the leader
sees the report and the relay's address. No database, no key, no Django: this package imports
nothing of the project (pyproject's import contracts), so that a third operator runs it alone
(docs/deployment.md, "The relay").

    python -m pfs_relay --leader https://leader.example --bind 127.0.0.1:8002
"""

__all__: list[str] = []
