"""The relay: runs the tasks of an epic through Switchboard with the attempt ledger (SYSTEM.md section 13).

The relay is a client of the server like any other: it pushes todos through the producer API with a human
API token and drains them over MCP with an endpoint credential. Every piece of state it relies on lives on
the server; `attempt-ledger.yml` is a view rebuilt from the server's attempt history.

Modules: `epic` (the epic file and its validation), `receipts` (worker receipts and their summary
encoding), `gating` (which attempt stops a task), `ledger` (task status and the ledger view), `runner`
(worker and gate processes), `client` (the MCP and producer API clients), `state` (the epic's todos on the
server), `loop` (the work loop), `manual` (block and unblock), `display` (progress), `cli` (the
`switchboard relay` commands).
"""
