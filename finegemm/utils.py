"""Small integer helpers shared by every layer (DeepGEMM-compatible names)."""


def ceil_div(x: int, y: int) -> int:
    """Smallest integer >= x / y for non-negative x and positive y."""
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    """Round x up to a multiple of y."""
    return ceil_div(x, y) * y
