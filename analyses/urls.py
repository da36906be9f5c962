from django.urls import path

from analyses import views

urlpatterns = [
    path("", views.analysis_list, name="analysis-list"),
    path("analyses/<str:identifier>/", views.analysis_detail, name="analysis-detail"),
    path("rounds/<int:pk>/", views.round_detail, name="round-detail"),
    path("rounds/<int:pk>/release.csv", views.release_csv, name="release-csv"),
]
