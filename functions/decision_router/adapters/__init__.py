"""The only modules that talk to AWS. Clients are created on first use, so importing
a handler never opens a connection (and tests can start moto first)."""
