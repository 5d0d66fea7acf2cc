"""Writing the trail: the group commit on its writer thread (its connection, statements,
deadlines and health), a refused record failing alone, outcomes stored under their
chain, and the trail's database handle that request handlers read through."""
