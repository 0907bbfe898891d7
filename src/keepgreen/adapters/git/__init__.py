"""Git adapters: the built-in code host over local repositories."""
