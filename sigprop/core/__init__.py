"""The ground floor: the state every rule transforms (moments), profiles, statistics, Gaussian expectations,
validation, JSON and output files, devices, progress. Nothing here knows a transformer."""
