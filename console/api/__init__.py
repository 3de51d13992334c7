"""Agent API v1: one DRF view per operation, its input and output serializers beside it."""
