"""Communication: collective and transfer costs over a link hierarchy (DESIGN.md §2).

    group.py       CommGroup (size, placement over nodes, link classes), Endpoint
    backend.py     CommBackend protocol, make_comm_backend("analytical" | "calibrated", gpu)
    analytical.py  alpha-beta ring/tree per link, hierarchical across nodes
    calibrated.py  measured AIConfigurator tables (vLLM custom all-reduce, NCCL), log-log interpolated
    link_pool.py   LinkPool: concurrent transfers sharing one link (processor sharing)
"""

from simulator.comm.analytical import AnalyticalCommBackend
from simulator.comm.backend import COMM_MODELS, CommBackend, make_comm_backend
from simulator.comm.group import CommGroup, Endpoint, intra_node_link
from simulator.comm.link_pool import LinkPool

__all__ = ["AnalyticalCommBackend", "COMM_MODELS", "CommBackend", "CommGroup", "Endpoint", "LinkPool",
           "intra_node_link", "make_comm_backend"]
