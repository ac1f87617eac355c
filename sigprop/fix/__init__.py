"""The fix: folding residual scales into weights and exporting sigprop models to Hugging Face checkpoints."""
