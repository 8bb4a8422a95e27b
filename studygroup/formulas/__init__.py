"""The formulas: attention in both notations, masks, RoPE, memory-bounded kernels. Plain tensors: no files, no model."""
