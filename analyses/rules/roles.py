"""Roles: a privacy officer is a staff user in the "Privacy officers" group, with these permissions."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, Group, Permission

from pfs_base.errors import NotAllowed

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


# Who may do what on an analysis (docs/roles.md). Spending budget and releasing belong to the
# analyst who owns the analysis; a privacy officer sets and approves its policy and may stop its
# rounds (a cancel or pause spends nothing), but never spends an analyst's budget. Pages, the API
# and the CLI all ask these two functions, so they cannot disagree.


def check_may_run(user: AbstractBaseUser, analysis: Any) -> None:
    """Start rounds or adaptive runs, resume or edit them, close a collection (it releases): the owner only."""
    if analysis.owner_id != user.pk:
        raise NotAllowed(
            f"Only {analysis.owner.get_username()}, who owns {analysis.identifier}, can spend its budget or release "
            "its rounds; a privacy officer approves the policy and can stop rounds, not run them."
        )


def check_may_stop(user: AbstractBaseUser, analysis: Any) -> None:
    """Cancel a round or pause an adaptive run: the owner, or a privacy officer (a stop spends nothing)."""
    if analysis.owner_id != user.pk and not is_privacy_officer(user):
        raise NotAllowed(f"Only the owner of {analysis.identifier} or a privacy officer can stop its rounds.")


def is_privacy_officer(user: AbstractBaseUser) -> bool:
    return bool(user.is_staff)
