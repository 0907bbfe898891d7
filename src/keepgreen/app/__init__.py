"""Use cases: each service loads, decides, saves and commits once; ports name what it needs."""
