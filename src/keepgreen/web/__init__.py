"""The HTTP edge: FastAPI app factory, wire schemas and routes of API v1."""
