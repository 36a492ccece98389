"""Analyses beyond the SQL tables: the what-if replay and its scenarios."""
