"""The rules the services and the API apply: roles and permissions, the policy devices enforce,
validation of JSON documents by dotted path, and idempotency keys.
"""
