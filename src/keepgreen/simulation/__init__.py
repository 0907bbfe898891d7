"""Virtual-time simulation of a queue: the real scheduler against in-memory git and CI."""
