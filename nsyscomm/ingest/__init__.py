"""Sources: each module turns one kind of input into rows of the normalized `collectives` table."""
