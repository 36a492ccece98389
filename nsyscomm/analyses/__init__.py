"""Analyses beyond the summary tables (one module each, SQL in sql/): the what-if replay, hangs."""
