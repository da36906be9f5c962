"""Which database holds which model: the token issuer and the helper each keep a store of their own.

The issuer knows which device asked for a token in which collection (``IssuedToken``) and holds
each collection's signing key (``TokenIssuerKey``); the aggregators know which token came with
which report. Kept in one database the two could be joined (issue 17). So the issuer's two models
live in the ``issuer`` alias — its own SQLite file on the embedded default, its own PostgreSQL
database in the documented deployment — and nothing else does. They name their collection by its
key, a plain value: no foreign key crosses the stores.

Likewise the helper, whose non-collusion with the leader is the whole of the privacy argument,
keeps its state and its private keys in the ``helper`` alias, which only the helper's own service
opens (pfs_web.settings_helper, HelperServiceRouter below); the leader's settings name it only in
the unit tests, which run the helper's views in the leader's process. It has the same schema as the
leader's aggregator tables (``HELPER_MODELS``: collections, rules, keys, spent tokens, rejection
counters, all with rows of its own) and the only table of helper shares; the leader's shares and
the pending uploads stay in ``default``. An aggregator names its store (aggregation.aggregators
``Aggregator.store``) and queries the shared models ``.using()`` it; the routing below is the
fallback for code that names no store: the leader's.
"""

from __future__ import annotations

DEFAULT = "default"
ISSUER = "issuer"
HELPER = "helper"
ISSUER_MODELS = frozenset({("aggregation", "tokenissuerkey"), ("aggregation", "issuedtoken")})
HELPER_ONLY_MODELS = frozenset(
    {
        ("aggregation", "helpershare"),
        ("aggregation", "helperjob"),
        ("aggregation", "helperrelease"),
        ("aggregation", "poplar1job"),
    }
)
# The aggregator tables both aggregators keep, each in its own store, with its own rows.
HELPER_MODELS = HELPER_ONLY_MODELS | {
    ("aggregation", name)
    for name in (
        "collection",
        "collectionrules",
        "aggregatorkey",
        "spenttoken",
        "reportrejection",
        "poplar1report",
        "poplar1level",
    )
}


def store_of(app_label: str, model_name: str | None) -> str:
    """Where a model is read and written when the caller names no store."""
    if (app_label, model_name) in ISSUER_MODELS:
        return ISSUER
    if (app_label, model_name) in HELPER_ONLY_MODELS:
        return HELPER
    return DEFAULT


def stores_of(app_label: str, model_name: str | None) -> frozenset[str]:
    """Every store that holds a table of the model."""
    if (app_label, model_name) in HELPER_ONLY_MODELS:
        return frozenset({HELPER})
    if (app_label, model_name) in HELPER_MODELS:
        return frozenset({DEFAULT, HELPER})
    return frozenset({store_of(app_label, model_name)})


def aggregator_store(role: str) -> str:
    """The store of an aggregator role ("leader" or "helper")."""
    return HELPER if role == "helper" else DEFAULT


class StoreRouter:
    def db_for_read(self, model, **hints) -> str:
        instance = hints.get("instance")
        if instance is not None and instance._state.db in stores_of(model._meta.app_label, model._meta.model_name):
            return instance._state.db  # a related row of one read from the helper's store stays there
        return store_of(model._meta.app_label, model._meta.model_name)

    def db_for_write(self, model, **hints) -> str:
        return self.db_for_read(model, **hints)

    def allow_relation(self, obj1, obj2, **hints) -> bool:
        return obj1._state.db == obj2._state.db

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints) -> bool:
        # Operations that name no model (none in this project yet) run on the default store only.
        return db in stores_of(app_label, model_name)


class HelperServiceRouter:
    """The helper's own service (pfs_web.settings_helper): every model it has is in its store, and
    only the helper's tables are created there — a migration of the leader's or the issuer's
    models, or of an app that is not the helper's, creates nothing."""

    def db_for_read(self, model, **hints) -> str:
        return HELPER

    def db_for_write(self, model, **hints) -> str:
        return HELPER

    def allow_relation(self, obj1, obj2, **hints) -> bool:
        return True

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints) -> bool:
        return db == HELPER and (app_label, model_name) in HELPER_MODELS
