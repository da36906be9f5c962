from django.urls import path

from analyses import views, views_adaptive

urlpatterns = [
    path("", views.analysis_list, name="analysis-list"),
    path("analyses/<str:identifier>/", views.analysis_detail, name="analysis-detail"),
    path("analyses/<str:identifier>/adaptive/", views_adaptive.adaptive_list, name="adaptive-list"),
    path("rounds/<int:pk>/", views.round_detail, name="round-detail"),
    path("rounds/<int:pk>/release.csv", views.release_csv, name="release-csv"),
    path("adaptive/<int:pk>/", views_adaptive.adaptive_detail, name="adaptive-detail"),
    path("adaptive/<int:pk>/status.json", views_adaptive.adaptive_status, name="adaptive-status"),
]
