"""keepgreen as a GitHub App: webhooks in, the API port, events acted on, feedback on PRs."""
