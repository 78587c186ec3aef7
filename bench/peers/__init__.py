"""The peer benchmark's parts (bench/peers_bench.py runs them).

harness.py     the System protocol, fresh databases, the interleaved rounds, the report
raw.py         raw SQL on Switchboard's own tables: per job, and k per statement, attempt rows included
switchboard.py Switchboard's paths: the core in process, MCP per claim
pgqueuer_peer.py, procrastinate_peer.py, oban_peer.py   the peers, each started its own documented way
registry.py    which systems run, in which order (the one place a new path is added)
"""
