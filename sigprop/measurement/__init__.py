"""Measurement: the statistics of real models at every site, recorded with hooks."""

from .hooks import Recorder, SiteSums, TokenSums, masked_sums, measure, merge_sums, pool_sums, profile_from_sums

__all__ = ["Recorder", "measure", "TokenSums", "SiteSums", "masked_sums", "pool_sums", "merge_sums",
           "profile_from_sums"]
