"""Roles: a privacy officer is a staff user in the "Privacy officers" group, with these permissions."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, Group, Permission

PRIVACY_OFFICERS = "Privacy officers"

_PERMISSIONS = [
    ("analyses", "analysis", ("view", "change", "add")),
    ("analyses", "fieldpolicy", ("view", "change", "add", "delete")),
    ("analyses", "recipe", ("view",)),
    ("analyses", "round", ("view",)),
    ("analyses", "release", ("view",)),
    ("devices", "fleet", ("view",)),
    ("devices", "policysnapshot", ("view",)),
    ("devices", "shardrun", ("view",)),
]


def privacy_officer_group() -> Group:
    group, _ = Group.objects.get_or_create(name=PRIVACY_OFFICERS)
    codenames = [f"{action}_{model}" for _, model, actions in _PERMISSIONS for action in actions]
    group.permissions.set(Permission.objects.filter(codename__in=codenames))
    return group


def make_privacy_officer(user: AbstractBaseUser) -> None:
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    user.groups.add(privacy_officer_group())
