"""The stable names of the analyses' Celery tasks (analyses.tasks).

Queued messages and the beat schedule carry these names, so they never change when code moves.
Services send tasks by name (pfs_base.task_queue.enqueue) and so never import the tasks module.
"""

from __future__ import annotations

DISPATCH_ROUND = "analyses.tasks.dispatch_round"
RUN_SHARD = "analyses.tasks.run_shard"
AGGREGATE_ROUND = "analyses.tasks.aggregate_round"
FAIL_ROUND = "analyses.tasks.fail_round"
REAP_ROUNDS = "analyses.tasks.reap_rounds"
ADVANCE_ADAPTIVE_RUN = "analyses.tasks.advance_adaptive_run"
COMPARE_ADAPTIVE_RUN = "analyses.tasks.compare_adaptive_run"
