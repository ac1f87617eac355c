"""Tests of sigprop.model."""
