"""One verification spec per component (ranges of Kedia et al. Table 22, simulation, prediction)."""
