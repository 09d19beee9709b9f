"""envlayer docker backend."""
