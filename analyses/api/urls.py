from django.urls import path
from rest_framework.authtoken.views import obtain_auth_token

from analyses.api import adaptive, calculators, views

urlpatterns = [
    path("token/", obtain_auth_token, name="api-token"),
    path("analyses/", views.AnalysisList.as_view(), name="api-analysis-list"),
    path("analyses/<str:identifier>/", views.AnalysisDetail.as_view(), name="api-analysis-detail"),
    path("analyses/<str:identifier>/recipes/", views.RecipeCreate.as_view(), name="api-recipe-create"),
    path("analyses/<str:identifier>/dry-run/", views.RecipeDryRun.as_view(), name="api-recipe-dry-run"),
    path("recipes/<int:pk>/", views.RecipeDetail.as_view(), name="api-recipe-detail"),
    path("recipes/<int:pk>/rounds/", views.RoundStart.as_view(), name="api-round-start"),
    path("rounds/<int:pk>/", views.RoundDetail.as_view(), name="api-round-detail"),
    path("rounds/<int:pk>/release/", views.ReleaseDetail.as_view(), name="api-release"),
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
]
