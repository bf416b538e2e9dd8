"""Public entry points, one module per kernel family."""
