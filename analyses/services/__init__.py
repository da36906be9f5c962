"""Analyst-side services, one module per seam (docs/architecture.md):

- ``policy``: analyses as policy (create, approve, the snapshot devices enforce, spending);
- ``recipes``: recipe validation, storage, and the task devices receive;
- ``budget``: the server's pre-check of the devices' budget checks;
- ``rounds``: the life of a round;
- ``releases``: what a round releases and how it is presented.

Import from the module, not from this package: there is nothing here.
"""
