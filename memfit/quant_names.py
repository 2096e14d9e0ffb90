"""How quants are named: llama.cpp's file-type names as they appear in tags and file names, and the default one."""

# A quant name (case-insensitive): Q4_K_M, IQ4_XS, Q8_0, TQ1_0, BF16, F16, F32, MXFP4, MXFP4_MOE, ...
QUANT_NAME = r"I?Q\d(?:_[A-Z0-9]+){0,2}|T?Q\d_\d|B?F16|F32|MXFP4(?:_MOE)?"
DEFAULT_QUANT = "Q4_K_M"  # what llama.cpp's -hf picks when a repository is named without a tag
