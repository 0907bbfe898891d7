"""The `keepgreen` command line: server, operator commands and API client commands."""
