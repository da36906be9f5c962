from django.urls import path

from analyses.pages import adaptive, analysis, budget, guide

urlpatterns = [
    path("", analysis.analysis_list, name="analysis-list"),
    path("analyses/<str:identifier>/", analysis.analysis_detail, name="analysis-detail"),
    path("analyses/<str:identifier>/adaptive/", adaptive.adaptive_list, name="adaptive-list"),
    path("analyses/<str:identifier>/budget/", budget.analysis_budget, name="analysis-budget"),
    path("analyses/<str:identifier>/audit/", budget.analysis_audit, name="analysis-audit"),
    path("analyses/<str:identifier>/audit.csv", budget.analysis_audit_csv, name="analysis-audit-csv"),
    path("analyses/<str:identifier>/policy/", budget.analysis_policy, name="analysis-policy"),
    path("compare/", budget.release_compare, name="release-compare"),
    path("guide/privacy/", guide.privacy_guide, name="privacy-guide"),
    path("rounds/<int:pk>/", analysis.round_detail, name="round-detail"),
    path("rounds/<int:pk>/release.csv", analysis.release_csv, name="release-csv"),
    path("rounds/<int:pk>/release.json", analysis.release_json, name="release-json"),
    path("rounds/<int:pk>/status.json", analysis.round_status, name="round-status"),
    path("rounds/<int:pk>/cancel/", analysis.round_cancel, name="round-cancel"),
    path("rounds/<int:pk>/close/", analysis.round_close, name="round-close"),
    path("rounds/<int:pk>/refine/", analysis.round_refine, name="round-refine"),
    path("adaptive/<int:pk>/", adaptive.adaptive_detail, name="adaptive-detail"),
    path("adaptive/<int:pk>/status.json", adaptive.adaptive_status, name="adaptive-status"),
]
