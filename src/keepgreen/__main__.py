"""`python -m keepgreen` runs the CLI."""

from keepgreen.cli.main import main

main()
