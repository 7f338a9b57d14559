"""Local cards: config entries, discovery (NVMe by serial, directories by label), probes.
See docs/cards.md. The modules, imported by name (this package imports none of them, so a
program that needs one part, such as the gateway library's ``cards.worker``, loads only it)::

    from awide_cluster.cards.spec import CardSpec, StoreProbeSpec       # config entries
    from awide_cluster.cards.observe import observe_card                # one card, observed
    from awide_cluster.cards.model import CardObservation, LocalCard, ProbeResult
    from awide_cluster.cards.directory import read_label, write_label   # directory cards
    from awide_cluster.cards.worker import ProbeWorker                  # blocking calls, bounded
"""
