"""GitHub, reached through its REST API as an App."""
