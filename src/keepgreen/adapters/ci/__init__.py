"""CI adapters: the built-in runner that runs a repository's command on a commit."""
