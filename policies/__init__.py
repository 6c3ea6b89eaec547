"""MPIJob admission policies: pure functions over plain dicts. Never imports flask or webhook."""
