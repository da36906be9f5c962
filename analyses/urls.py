from django.urls import path

from analyses import views, views_adaptive, views_budget

urlpatterns = [
    path("", views.analysis_list, name="analysis-list"),
    path("analyses/<str:identifier>/", views.analysis_detail, name="analysis-detail"),
    path("analyses/<str:identifier>/adaptive/", views_adaptive.adaptive_list, name="adaptive-list"),
    path("analyses/<str:identifier>/budget/", views_budget.analysis_budget, name="analysis-budget"),
    path("analyses/<str:identifier>/audit/", views_budget.analysis_audit, name="analysis-audit"),
    path("analyses/<str:identifier>/audit.csv", views_budget.analysis_audit_csv, name="analysis-audit-csv"),
    path("analyses/<str:identifier>/policy/", views_budget.analysis_policy, name="analysis-policy"),
    path("compare/", views_budget.release_compare, name="release-compare"),
    path("rounds/<int:pk>/", views.round_detail, name="round-detail"),
    path("rounds/<int:pk>/release.csv", views.release_csv, name="release-csv"),
    path("rounds/<int:pk>/release.json", views.release_json, name="release-json"),
    path("rounds/<int:pk>/status.json", views.round_status, name="round-status"),
    path("rounds/<int:pk>/cancel/", views.round_cancel, name="round-cancel"),
    path("rounds/<int:pk>/close/", views.round_close, name="round-close"),
    path("rounds/<int:pk>/refine/", views.round_refine, name="round-refine"),
    path("adaptive/<int:pk>/", views_adaptive.adaptive_detail, name="adaptive-detail"),
    path("adaptive/<int:pk>/status.json", views_adaptive.adaptive_status, name="adaptive-status"),
]
