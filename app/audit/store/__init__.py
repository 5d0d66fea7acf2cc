"""How the trail is stored, under every other room: its tables and database engine, its
key, a record and its packed row, the version rows records share, and the keyed MACs
that chain them."""
