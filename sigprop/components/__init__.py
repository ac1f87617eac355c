"""Transformer components: each file holds one ``torch.nn.Module`` beside its pure forward/backward moment rules."""
