"""SGLang 0.5.23's radix cache and token pool (any page size).

SGLang 0.5.23 builds its tree cache as ``UnifiedRadixCache`` (``mem_cache/unified_radix_cache.py``,
a Rust tree core whose Python twin is ``mem_cache/unified_cache/unified_tree_core.py``; the older
``mem_cache/radix_cache.py`` is not used for a plain model). A radix tree over token ids; every
stored token owns one slot of the token pool. Nodes that no request has locked (``lock_ref == 0``)
are *evictable* and count as free for admission; locked ones are *protected*. Mirrored:

* access times from one counter (``get_and_increase_time_counter``): a new node takes a tick when
  it is made (and one more for its creation time); a split makes the head node, then stamps the
  tail with a new tick; ``insert`` ticks the root and every node it walks, in order, before it
  splits or adds; ``match_prefix`` walks without touching, then stamps the node it ends on with a
  new tick T and its ancestors T - 1e-5, T - 2e-5, ...;
* ``match_prefix``: the longest stored prefix, splitting the node the match ends inside;
* ``insert``: the length already stored (whose duplicate slots the caller frees) and the new leaf;
* ``inc_lock_ref`` / ``dec_lock_ref`` along the path to the root, moving sizes between evictable and
  protected as a node's count leaves or reaches 0;
* ``evict(n)``: unlocked leaves, least recently accessed first, a parent joining the heap once it is
  a childless unlocked node, until ``n`` tokens are freed (whole nodes).

With a page size P > 1 (``RadixKey.page_aligned`` / ``child_key``): keys are cut to whole pages, a
node's children are keyed by their first page, and matches, splits and evictions move in whole
pages; the pool counts tokens (``available_size()``: free pages x P). Callers pass page-aligned
keys. Keys are ``array('q')`` slices (C-speed comparison).
"""

from __future__ import annotations

import heapq
from array import array
from itertools import count


class TokenPool:
    """The token-to-KV pool: ``size`` slots, ``available`` free (SGLang ``available_size()``)."""

    __slots__ = ("size", "available")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"token pool size {size}; must be >= 1")
        self.size = size
        self.available = size

    def alloc(self, n: int) -> None:
        if n > self.available:
            raise RuntimeError(f"token pool: allocating {n} slots with {self.available} free")
        self.available -= n

    def free(self, n: int) -> None:
        self.available += n
        if self.available > self.size:
            raise RuntimeError(f"token pool: {self.available} free slots of {self.size} (double free)")


class RadixNode:
    __slots__ = ("key", "children", "parent", "lock_ref", "last_access", "nid")

    def __init__(self, key: array, parent: RadixNode | None, stamp: float, nid: int) -> None:
        self.key = key
        self.children: dict[int, RadixNode] = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_access = stamp
        self.nid = nid


def common_prefix_len(a: array, b: array) -> int:
    """Length of the common prefix of two token arrays (slice compares in C, binary search)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n            # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class RadixCache:
    """SGLang's ``UnifiedRadixCache`` (full attention, LRU eviction) over a ``TokenPool``."""

    def __init__(self, pool: TokenPool, page_size: int = 1) -> None:
        if page_size < 1 or pool.size % page_size:
            raise ValueError(f"page size {page_size} does not divide the pool of {pool.size} tokens")
        self.pool = pool
        self.page_size = page_size
        self._clock = count(1)
        self._ids = count(1)
        self.root = RadixNode(array("q"), None, 0.0, 0)
        self.root.lock_ref = 1          # never evicted, never counted
        self.evictable_size = 0
        self.protected_size = 0
        # Leaves by (last access, id), lazily: an entry is pushed whenever a leaf's time changes or
        # it becomes unlocked or childless, and checked when popped (stale entries are dropped), so
        # an eviction pops the same leaves in the same order as SGLang's heap over all evictable
        # leaves, without walking the tree. Rebuilt when stale entries outnumber the nodes.
        self._heap: list[tuple[float, int, RadixNode]] = []
        self._num_nodes = 0

    def _child_key(self, key: array, at: int):
        """The key of the child holding ``key[at:]`` (``RadixKey.child_key``): its first token, or
        its first page."""
        return key[at] if self.page_size == 1 else key[at:at + self.page_size].tobytes()

    def _common(self, a: array, b: array) -> int:
        """Common prefix length of two keys, in whole pages."""
        n = common_prefix_len(a, b)
        return n if self.page_size == 1 else n - n % self.page_size

    def _tick(self) -> float:
        return float(next(self._clock))

    def _stamp(self, node: RadixNode, t: float) -> None:
        node.last_access = t
        if not node.children:
            heapq.heappush(self._heap, (t, node.nid, node))

    def _new_node(self, key: array, parent: RadixNode) -> RadixNode:
        node = RadixNode(key, parent, self._tick(), next(self._ids))
        self._tick()            # its creation_time takes the next tick
        self._num_nodes += 1
        return node

    def _split(self, child: RadixNode, at: int) -> RadixNode:
        """Split ``child`` after ``at`` tokens: a new node holds the head and ``child`` the tail."""
        head = self._new_node(child.key[:at], child.parent)
        self._stamp(child, self._tick())        # _split_node stamps the tail after making the head
        head.lock_ref = child.lock_ref
        child.parent.children[self._child_key(child.key, 0)] = head
        child.key = child.key[at:]
        child.parent = head
        head.children[self._child_key(child.key, 0)] = child
        return head

    def match_prefix(self, key: array) -> tuple[int, RadixNode]:
        """(matched tokens, last node) of ``key``; splits the node a match ends inside."""
        node = self.root
        matched = 0
        while matched < len(key):
            child = node.children.get(self._child_key(key, matched))
            if child is None:
                break
            n = self._common(child.key, key[matched:matched + len(child.key)])
            if n < len(child.key):
                node = self._split(child, n)
                matched += n
                break
            node = child
            matched += n
        stamp, x = self._tick(), node
        while x is not None:            # _match_post_processor: the deepest node newest
            self._stamp(x, stamp)
            stamp -= 1e-5
            x = x.parent
        return matched, node

    def insert(self, key: array) -> tuple[int, RadixNode]:
        """Store ``key``: (tokens of it already stored, its last node). The new tail becomes one
        evictable leaf; the caller frees the slots of the part that was already stored."""
        node = self.root
        node.last_access = self._tick()
        done = 0
        while done < len(key):
            child = node.children.get(self._child_key(key, done))
            if child is None:
                break
            self._stamp(child, self._tick())
            full = len(child.key)
            n = self._common(child.key, key[done:done + full])
            done += n
            if n < full:
                node = self._split(child, n)
                break
            node = child
        if done < len(key):
            leaf = self._new_node(key[done:], node)
            node.children[self._child_key(leaf.key, 0)] = leaf
            self.evictable_size += len(leaf.key)
            self._stamp(leaf, leaf.last_access)
            node = leaf
        return done, node

    def inc_lock_ref(self, node: RadixNode) -> None:
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
            node.lock_ref += 1
            node = node.parent

    def dec_lock_ref(self, node: RadixNode) -> None:
        while node is not self.root:
            if node.lock_ref == 1:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
                if not node.children:       # an unlocked leaf: evictable from now
                    heapq.heappush(self._heap, (node.last_access, node.nid, node))
            node.lock_ref -= 1
            node = node.parent

    def evictable_leaves(self) -> list[RadixNode]:
        """Every unlocked leaf (a walk of the tree)."""
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node.lock_ref == 0 and node is not self.root:
                out.append(node)
        return out

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` slots (or all evictable ones) leaf by leaf, least recently
        accessed first; returns the tokens freed."""
        if num_tokens <= 0:
            return 0
        heap = self._heap
        if len(heap) > 2 * self._num_nodes + 1024:      # mostly stale entries: rebuild
            heap[:] = [(n.last_access, n.nid, n) for n in self.evictable_leaves()]
            heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            t, _, node = heapq.heappop(heap)
            parent = node.parent
            if parent is None or node.children or node.lock_ref or t != node.last_access:
                continue                    # evicted, no longer a leaf, locked, or touched since
            del parent.children[self._child_key(node.key, 0)]
            node.parent = None
            self._num_nodes -= 1
            self.evictable_size -= len(node.key)
            self.pool.free(len(node.key))
            freed += len(node.key)
            if not parent.children and parent.lock_ref == 0 and parent is not self.root:
                heapq.heappush(heap, (parent.last_access, parent.nid, parent))
        return freed

    def evict_to_free(self, num_tokens: int) -> None:
        """SGLang ``evict_to_free_tokens``: evict the shortfall of free slots below ``num_tokens``."""
        shortfall = num_tokens - self.pool.available
        if shortfall > 0:
            self.evict(shortfall)

    def total_size(self) -> int:
        return self.evictable_size + self.protected_size
