"""Adapters: the database, the git host and (later) CI runners and parsers."""
