"""CPU-only discrete-event simulator of LLM serving (vLLM v1 semantics). Never imports torch."""
