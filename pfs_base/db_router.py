"""Which database holds which model: the token issuer's state in a store of its own.

The issuer knows which device asked for a token in which collection (``IssuedToken``) and holds
each collection's signing key (``TokenIssuerKey``); the aggregators know which token came with
which report. Kept in one database the two could be joined (issue 17). So the issuer's two models
live in the ``issuer`` alias — its own SQLite file on the embedded default, its own PostgreSQL
database in the documented deployment — and nothing else does. They name their collection by its
key, a plain value: no foreign key crosses the stores.
"""

from __future__ import annotations

ISSUER = "issuer"
ISSUER_MODELS = frozenset({("aggregation", "tokenissuerkey"), ("aggregation", "issuedtoken")})


def store_of(app_label: str, model_name: str | None) -> str:
    return ISSUER if (app_label, model_name) in ISSUER_MODELS else "default"


class StoreRouter:
    def db_for_read(self, model, **hints) -> str:
        return store_of(model._meta.app_label, model._meta.model_name)

    def db_for_write(self, model, **hints) -> str:
        return store_of(model._meta.app_label, model._meta.model_name)

    def allow_relation(self, obj1, obj2, **hints) -> bool:
        return store_of(obj1._meta.app_label, obj1._meta.model_name) == store_of(
            obj2._meta.app_label, obj2._meta.model_name
        )

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints) -> bool:
        # Operations that name no model (none in this project yet) run on the default store only.
        return store_of(app_label, model_name) == db
