"""Tiny revenue forecast helper for the SparseFS demo workspace.

All figures are fictional and exist only to give the demo something to read.
"""

from __future__ import annotations


def forecast_revenue(base: float, growth_rates: list[float]) -> list[float]:
    """Project revenue forward from a base year.

    Each entry in ``growth_rates`` is an annual growth rate expressed as a
    fraction (0.25 means +25%). The function returns one projected revenue
    figure per rate, compounding from ``base``.

    >>> forecast_revenue(100.0, [0.10, 0.10])
    [110.0, 121.0]
    """
    if base < 0:
        raise ValueError("base revenue must be non-negative")
    projections: list[float] = []
    current = base
    for rate in growth_rates:
        if rate <= -1.0:
            raise ValueError(f"growth rate {rate} would wipe out revenue")
        current = round(current * (1.0 + rate), 2)
        projections.append(current)
    return projections


def midpoint(low: float, high: float) -> float:
    """Return the midpoint of a guidance range."""
    return (low + high) / 2.0


if __name__ == "__main__":
    # Base-year revenue in USD millions and a made-up three-year outlook.
    outlook = [midpoint(0.22, 0.27), 0.20, 0.18]
    for year, value in zip(range(2024, 2027), forecast_revenue(286.4, outlook), strict=False):
        print(f"{year}: ${value:,.1f}M")
