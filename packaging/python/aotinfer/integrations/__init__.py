"""Adapters that plug aotinfer kernels into other frameworks' attention hooks. Each submodule
imports its framework on import; this package imports nothing.

  aotinfer.integrations.transformers   Hugging Face transformers' continuous batching
                                       (generate_batch, init_continuous_batching):
                                       register(), then attn_implementation="paged|aotinfer"
"""
