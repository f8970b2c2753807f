"""Paged KV cache: block pool with vLLM's free-queue eviction order and a prefix cache."""

from simulator.kv_cache.block_pool import BlockPool, FreeBlockQueue
from simulator.kv_cache.hybrid import HybridKVCacheManager
from simulator.kv_cache.manager import KVCacheManager, PrefixCacheStats

__all__ = ["BlockPool", "FreeBlockQueue", "HybridKVCacheManager", "KVCacheManager", "PrefixCacheStats"]
