from django.http import HttpRequest, JsonResponse


def not_found(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"error": "not_found", "detail": f"no API resource at {request.path}"}, status=404)
