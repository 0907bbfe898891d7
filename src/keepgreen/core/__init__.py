"""The pure domain: queue model, ordering and policies. Standard library only."""
