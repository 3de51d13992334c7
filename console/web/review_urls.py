"""The review area: sign-in, the queue, the review form of one execution, and the auditor's pages."""

from django.contrib.auth import views as auth_views
from django.urls import path

from console.web import audit, queue, review, user_answers

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("executions/", queue.queue, name="review-queue"),
    path("executions/decided/", queue.decided, name="review-decided"),
    path("executions/<uuid:execution_id>/claim/", queue.claim, name="review-claim"),
    path("executions/<uuid:execution_id>/unclaim/", queue.unclaim, name="review-unclaim"),
    path("executions/<uuid:execution_id>/", review.review, name="review-execution"),
    path("executions/<uuid:execution_id>/progress/", review.progress, name="review-progress"),
    path("executions/<uuid:execution_id>/live/", review.live, name="review-live"),
    path("executions/<uuid:execution_id>/approve-slot/", review.approve_slot, name="review-approve-slot"),
    path("executions/<uuid:execution_id>/answer/", review.answer_slot, name="review-answer"),
    path(
        "executions/<uuid:execution_id>/approve/", review.approve_execution, name="review-approve-execution"
    ),
    path("executions/<uuid:execution_id>/reject/", review.reject, name="review-reject"),
    path("executions/<uuid:execution_id>/answers/", user_answers.user_answers, name="user-answers"),
    path("audit/", audit.records, name="audit-records"),
    path("audit/records/<int:record_id>/", audit.record_detail, name="audit-record"),
    path("audit/verify/", audit.verify, name="audit-verify"),
    path("audit/export.csv", audit.export_csv, name="audit-export-csv"),
    path("audit/export.jsonl", audit.export_jsonl, name="audit-export-jsonl"),
]
