"""Hugging Face models in sigprop (the optional extra ``hf``)."""
