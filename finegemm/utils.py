"""Small helpers shared by every layer (ceil_div and align keep their DeepGEMM names)."""


def ceil_div(x: int, y: int) -> int:
    """Smallest integer >= x / y for non-negative x and positive y."""
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    """Round x up to a multiple of y."""
    return ceil_div(x, y) * y


def write_empty_product(d, c) -> None:
    """D = C + (a product over an empty K): d gets c, or zeros without c (c may be d itself)."""
    if c is None:
        d.zero_()
    elif c is not d:
        d.copy_(c)
