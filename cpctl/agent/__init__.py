"""The agent: every operation on a node's files, locks, commands and HTTP, standard library only.

``LocalHost`` calls these modules in-process; ``AgentHost`` ships them to a master (``host/agent.py``
assembles them, in ``AGENT_MODULES`` order, into one program that runs there with ``python3 -S``)
and talks to them as JSON lines over an SSH channel. One implementation means the atomicity, fsync
and locking rules are the same locally and remotely, and the master needs nothing installed beyond
python3 (>= 3.8): keep every module here free of third-party imports, of imports of cpctl outside
this package, and of syntax newer than 3.8. A module imports its siblings only as
``from cpctl.agent.MODULE import NAME[, ...]`` at its top (the assembler drops those lines), and no
two modules define the same top-level name (the assembled program is one namespace).

Errors are raised as ``OSError`` (with errno) or ``LockBusy``; the agent transports both.
"""
