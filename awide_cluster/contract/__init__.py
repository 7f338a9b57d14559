"""Contracts shared by the daemon and the gateway library: one implementation each.

- ``keys``: the etcd key layout under ``/awide/<cluster>/``.
- ``registry``: the card registry document (schema, encode/decode, validation).
- ``slots``: the pure slot function, from registry content to the slot table.
- ``report``: the host report each daemon writes to ``members/<host>``.
- ``records``: the leader, gateway, layout and intent records.
- ``untrusted``: the one way from bytes read from etcd to a JSON object (bounded before it is
  parsed), the typed error every decoder raises (``BadValue``), and ``clean_text`` for writers.

Nothing here does I/O; everything is plain frozen data and pure functions.
"""
