"""What the round lifecycle announces, so that the layers above it can react without being called.

``round_finished`` is sent, inside the transaction that ends it, when a round is released, fails
or is cancelled (analyses.services.rounds). Adaptive runs subscribe in AnalysesConfig.ready.
Receivers take ``round_`` as a keyword.
"""

from __future__ import annotations

from django.dispatch import Signal

round_finished = Signal()
