"""The averaged partial Jacobian norm (APJN) of normalization-free and pre-LN transformers (Alekseev 2026)."""
