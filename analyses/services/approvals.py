"""The privacy officer's approval workflow around analysis_approve: each edit recorded with its
old → new values, a pending edit rejected with a reason (and so discarded), and the history of
edits, approvals and rejections.

An edit changes the analysis's columns, never what devices enforce (its approved snapshot). It
waits for approval by another officer (analyses.services.policy.analysis_approve), or is
rejected: the columns go back to the snapshot, which never changed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from analyses.models import Analysis, FieldPolicy, PolicyEdit, PolicyRejection
from analyses.rules.enforced_policy import pending_changes
from analyses.services.policy import analysis_lock
from devices.models import Fleet
from pfs_base.errors import Conflict, NotAllowed, ValidationFailed

REASON_REQUIRED = "Say why you reject it: the reason is recorded and shown in the analysis's history."


def approval_lines(analysis: Analysis) -> list[str]:
    """What approving ``analysis`` now would send devices, in words: the change from the snapshot
    they enforce, or, never approved, the whole policy (from nothing)."""
    edited = analysis.edited_policy()
    return pending_changes(_enforced_or_blank(analysis, edited), edited)


def approval_lines_digest(lines: list[str]) -> str:
    """Names the diff an officer reviewed: an approval posted from a page showing another diff
    (an edit saved since it was opened) is refused rather than approving what nobody saw."""
    return hashlib.sha256(json.dumps(lines, ensure_ascii=False).encode()).hexdigest()


def _enforced_or_blank(analysis: Analysis, edited: dict[str, Any]) -> dict[str, Any]:
    return analysis.snapshot.content if analysis.snapshot_id is not None else _blank(edited)


def _blank(policy: Any) -> Any:
    """The policy's shape with no values: a first approval's diff, one line per value set."""
    return {key: _blank(value) for key, value in policy.items()} if isinstance(policy, dict) else None


def pending_editors(analysis: Analysis) -> list[PolicyEdit]:
    """The edits waiting for approval, oldest first, with who made them."""
    return list(analysis.policy_edits.filter(outcome=PolicyEdit.Outcome.PENDING).select_related("edited_by"))


def policy_edit_record(
    *, analysis: Analysis, officer: AbstractBaseUser, before: dict[str, Any] | None
) -> PolicyEdit | None:
    """Record an officer's save of ``analysis``: what it changed from ``before`` (the policy as the
    columns held it; None for a new analysis). None when no value of the policy changed (its
    title, say). An edit that brings the policy back to what devices enforce leaves nothing to
    approve: the pending edits are closed as undone."""
    after = analysis.edited_policy()
    changes = pending_changes(before if before is not None else _blank(after), after)
    if not changes:
        return None
    with transaction.atomic():
        edit = PolicyEdit.objects.create(
            analysis=analysis, edited_by=officer, edited_at=timezone.now(), changes=changes
        )
        if analysis.snapshot_id is not None and not analysis.pending_changes:
            analysis.policy_edits.filter(outcome=PolicyEdit.Outcome.PENDING).update(outcome=PolicyEdit.Outcome.UNDONE)
    return edit


def analysis_reject(*, analysis: Analysis, officer: AbstractBaseUser, reason: str) -> PolicyRejection:
    """Reject the pending edits of ``analysis``: they are discarded (its columns go back to the
    snapshot devices enforce, which does not change), and the reason is recorded."""
    if not officer.is_staff:
        raise NotAllowed("Only a privacy officer can reject an edit.")
    reason = (reason or "").strip()
    if not reason:
        raise ValidationFailed({"reason": [REASON_REQUIRED]})
    if analysis.snapshot_id is None:
        raise Conflict("Never approved: there is no enforced policy to go back to. Edit the draft, or approve it.")
    with transaction.atomic():
        analysis = analysis_lock(analysis)
        changes = analysis.pending_changes
        if not changes:
            raise Conflict("Nothing to reject: devices already enforce this policy as saved.")
        _policy_restore(analysis, analysis.snapshot.content)
        analysis.policy_edits.filter(outcome=PolicyEdit.Outcome.PENDING).update(outcome=PolicyEdit.Outcome.REJECTED)
        return PolicyRejection.objects.create(
            analysis=analysis, rejected_by=officer, rejected_at=timezone.now(), reason=reason, changes=changes
        )


def _policy_restore(analysis: Analysis, content: dict[str, Any]) -> None:
    """The columns set back to ``content`` (a snapshot): edited_policy() then equals it. The
    identifier never changed (read-only once approved); title and owner are not policy."""
    budget = content["budget"]
    analysis.fleet = Fleet.objects.get(name=content["fleet"])
    analysis.query_class = content["queryClass"]
    analysis.epsilon_allowed = budget["epsilon"]
    analysis.reports_allowed = budget["reports"]
    analysis.delta = budget["delta"]
    analysis.accountant = budget.get("accountant", "basic")  # a snapshot naming none is basic
    analysis.min_cohort_floor = budget.get("minCohort")
    analysis.max_buckets = budget.get("maxBuckets")
    analysis.delta_total = budget.get("deltaTotal")
    analysis.save()
    analysis.field_policies.exclude(field__in=list(content["fields"])).delete()
    for name, spec in content["fields"].items():
        FieldPolicy.objects.update_or_create(
            analysis=analysis,
            field=name,
            defaults={
                "local_epsilon": spec["localEpsilon"],
                "epsilon": spec["epsilon"],
                "reports": spec["reports"],
                "aggregator_noise": spec.get("aggregatorNoise", False),
                "delta_total": spec.get("deltaTotal"),
            },
        )


def policy_history(analysis: Analysis) -> list[dict[str, Any]]:
    """Every edit (old → new), approval (what it sent devices) and rejection (why), newest first,
    each with who and when."""
    events: list[dict[str, Any]] = [
        {
            "at": edit.edited_at,
            "by": edit.edited_by,
            "action": "Edited",
            "changes": edit.changes,
            "note": edit.get_outcome_display(),
        }
        for edit in analysis.policy_edits.select_related("edited_by")
    ]
    previous = None
    for approval in analysis.approvals.select_related("approved_by", "snapshot"):
        content = approval.snapshot.content
        events.append(
            {
                "at": approval.approved_at,
                "by": approval.approved_by,
                "action": "Approved",
                "changes": pending_changes(previous if previous is not None else _blank(content), content),
                "note": f"Devices enforce snapshot {approval.snapshot.digest[:16]}…",
            }
        )
        previous = content
    events.extend(
        {
            "at": rejection.rejected_at,
            "by": rejection.rejected_by,
            "action": "Rejected",
            "changes": rejection.changes,
            "note": f"Reason: {rejection.reason}",
        }
        for rejection in analysis.rejections.select_related("rejected_by")
    )
    return sorted(events, key=lambda event: event["at"], reverse=True)
