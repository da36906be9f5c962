"""Accuracy first: a recipe's expected error per bucket, the "too noisy" refusal, and proposals from a target.

The numbers are privacy.accuracy's (the release's own estimators); this module applies them to an
analysis: its fleet, the reports a recipe expects (fleet x sampling rate), the go-ahead a start needs.
"""

from __future__ import annotations

from analyses.models import Analysis
from privacy.accuracy import ExpectedError, expected_error
from privacy.parameters import PrivacyParameters

# The start's go-ahead for a spend the server expects to be wasted (analyses.services.cohorts):
# one confirmation, for batches below the minimum cohort and for noise above most buckets' counts.
CONFIRM_KEY = "confirmSmallCohorts"


def recipe_expected_error(analysis: Analysis, privacy: PrivacyParameters, buckets: int) -> ExpectedError:
    """The expected error per bucket of a recipe over ``buckets`` buckets, for the reports its
    sampling rate expects from the analysis's fleet (one release; a cohort split releases each
    batch over fewer reports, with the same noise and a smaller count a bucket)."""
    return expected_error(privacy, buckets=buckets, reports=analysis.fleet.size * privacy.sampling_rate)


def too_noisy_refusal(error: ExpectedError) -> str | None:
    """Why a start needs a go-ahead for its noise, in words; None when most buckets can hold it."""
    if not error.too_noisy:
        return None
    return (
        f"The expected noise exceeds what most buckets can hold: ±{error.half_width:,.0f} devices per bucket at 95% "
        f"against about {error.per_bucket:,.4g} devices a bucket ({error.reports:,.0f} reports expected over "
        f"{error.buckets:,} buckets), so most counts would not be told from zero, though every device spends. "
        "Confirm to start anyway, or use fewer buckets, more devices (sampling rate) or a larger ε₀ or ε."
    )
