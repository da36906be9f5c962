from django.urls import path

from analyses.api import adaptive, budget, calculators, device_rounds, views

urlpatterns = [
    path("token/", views.TokenObtain.as_view(), name="api-token"),
    path("analyses/", views.AnalysisList.as_view(), name="api-analysis-list"),
    path("fleets/", views.FleetList.as_view(), name="api-fleet-list"),
    path("fleets/<slug:name>/", views.FleetDetail.as_view(), name="api-fleet-detail"),
    path("analyses/<str:identifier>/", views.AnalysisDetail.as_view(), name="api-analysis-detail"),
    path("analyses/<str:identifier>/recipes/", views.RecipeCreate.as_view(), name="api-recipe-create"),
    path("analyses/<str:identifier>/dry-run/", views.RecipeDryRun.as_view(), name="api-recipe-dry-run"),
    path("analyses/<str:identifier>/recipes/validate/", views.RecipeValidate.as_view(), name="api-recipe-validate"),
    path("analyses/<str:identifier>/budget/", budget.AnalysisBudget.as_view(), name="api-analysis-budget"),
    path("analyses/<str:identifier>/audit/", budget.AnalysisAudit.as_view(), name="api-analysis-audit"),
    path("analyses/<str:identifier>/policy/", budget.AnalysisPolicy.as_view(), name="api-analysis-policy"),
    path("compare/", budget.ReleaseCompare.as_view(), name="api-release-compare"),
    path("recipes/<int:pk>/", views.RecipeDetail.as_view(), name="api-recipe-detail"),
    path("recipes/<int:pk>/rounds/", views.RoundStart.as_view(), name="api-round-start"),
    path("rounds/", views.RoundList.as_view(), name="api-round-list"),
    path("rounds/<int:pk>/", views.RoundDetail.as_view(), name="api-round-detail"),
    path("rounds/<int:pk>/cancel/", views.RoundCancel.as_view(), name="api-round-cancel"),
    path("rounds/<int:pk>/close/", device_rounds.RoundClose.as_view(), name="api-round-close"),
    path("rounds/<int:pk>/release/", views.ReleaseDetail.as_view(), name="api-release"),
    path("rounds/<int:pk>/release.csv", views.ReleaseCsv.as_view(), name="api-release-csv"),
    path("adaptive-runs/", adaptive.AdaptiveRunList.as_view(), name="api-adaptive-run-list"),
    path("adaptive-runs/<int:pk>/", adaptive.AdaptiveRunDetail.as_view(), name="api-adaptive-run-detail"),
    path("adaptive-runs/<int:pk>/pause/", adaptive.AdaptiveRunPause.as_view(), name="api-adaptive-run-pause"),
    path("adaptive-runs/<int:pk>/resume/", adaptive.AdaptiveRunResume.as_view(), name="api-adaptive-run-resume"),
    path(
        "adaptive-runs/<int:pk>/next-recipe/",
        adaptive.AdaptiveRunNextRecipe.as_view(),
        name="api-adaptive-run-next-recipe",
    ),
    path("privacy/amplify/", calculators.PrivacyAmplify.as_view(), name="api-privacy-amplify"),
    path("privacy/min-cohort/", calculators.PrivacyMinCohort.as_view(), name="api-privacy-min-cohort"),
    path("privacy/gaussian/", calculators.PrivacyGaussian.as_view(), name="api-privacy-gaussian"),
    path("privacy/curve/", calculators.PrivacyCurve.as_view(), name="api-privacy-curve"),
]
